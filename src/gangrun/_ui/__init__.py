"""`gangrun ui`: a web page of the tasks of one backend and each task's timeline, served by the CLI's process.

    server.py    the HTTP server (standard library), its routes and the JSON it answers
    static/      index.html, app.js, style.css: plain files, no build step; the script only draws

The JSON is made in Python: `gangrun._core.lanes` turns a task's view and events into the lanes the
page draws, so the chart is unit-tested without a browser.
"""

from gangrun._ui.server import UiServer, serve, start

__all__ = ["UiServer", "serve", "start"]
