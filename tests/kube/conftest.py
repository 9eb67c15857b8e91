"""Tests of the Kubernetes backend without a cluster: pure functions, and the controller on a fake API."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
