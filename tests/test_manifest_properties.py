"""S1 and issue 13.4 as a property: whatever the manifest, `gangrun validate` exits 0 or 2 with one line.

Generated documents mix the real field names with hostile values (NaN, infinities, 400-digit numbers,
lone surrogates, deep nesting, wrong types) and are written as YAML, as JSON, or mangled at the byte
level. An exception escaping `main` fails the test, so does a traceback or a second line.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangrun.cli import main

FIELDS = ["nodes", "nprocPerNode", "command", "workingDir", "env", "image", "resources", "retries",
          "maxSystemRetries", "maxRuntime", "failurePolicy", "queue", "priorityClass", "checkpoint",
          "terminationGracePeriod", "cpu", "memory", "gpu", "maxRestarts", "resumeAfterPreemption", "uri",
          "name", "namespace", "labels"]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30), st.integers(min_value=10**399, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),  # includes lone surrogates
    st.sampled_from(["1h", "99999999999d", "1e999999999", "500m", "1Gi", ".inf", "-1", "0", "", "\0", "\ud800",
                     "2024-01-01", "1.0e+300", "python"]),
)
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


@st.composite
def documents(draw: st.DrawFn) -> Any:
    spec = {"nodes": 1, "command": ["true"]}
    spec.update(draw(st.dictionaries(st.sampled_from(FIELDS), values, max_size=4)))
    doc: dict[str, Any] = {"apiVersion": "gangrun.dev/v1alpha1", "kind": "ClusteredTask",
                           "metadata": draw(st.one_of(st.just({"name": "t"}), st.dictionaries(keys, values))),
                           "spec": spec}
    if draw(st.booleans()):
        doc[draw(keys)] = draw(values)
    return doc


def _yaml_bytes(doc: Any) -> bytes:
    try:
        return yaml.safe_dump(doc, allow_unicode=False).encode()
    except (yaml.YAMLError, UnicodeEncodeError, ValueError):
        return json.dumps(doc).encode()


@st.composite
def manifest_bytes(draw: st.DrawFn) -> tuple[str, bytes]:
    doc = draw(documents())
    form = draw(st.sampled_from(["yaml", "json", "mangled", "random"]))
    if form == "json":
        return "t.json", json.dumps(doc).encode()  # NaN and Infinity as JSON's extensions write them
    if form == "random":
        return "t.yaml", draw(st.binary(max_size=200))
    data = _yaml_bytes(doc)
    if form == "mangled":
        at = draw(st.integers(min_value=0, max_value=len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return "t.yaml", data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifest_bytes())
def test_s1_validate_never_shows_a_traceback_and_exits_0_or_2_with_one_line(case: tuple[str, bytes]) -> None:
    name, data = case
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["validate", str(path)])
    if code == 0:
        assert err.getvalue() == "" and out.getvalue().count("\n") == 1
    else:
        assert code == 2, err.getvalue()
        assert err.getvalue().startswith("gangrun: error: ") and err.getvalue().count("\n") == 1, err.getvalue()
        assert "Traceback" not in err.getvalue()


@settings(max_examples=300, deadline=None)
@given(documents())
def test_s1_the_parser_raises_only_spec_errors_of_one_line(doc: Any) -> None:
    """Documents also reach the parser without a file: from the API server and from the local store."""
    from gangrun._core.spec import parse_manifest
    from gangrun._errors import SpecError

    try:
        parse_manifest(doc)
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) < 400, str(e)
