"""``linearizer explore``: an interactive page over a trained run (``pip install linearizer[app]``).

The handlers (:class:`Explorer` and the ``*_views`` modules) are plain Python over numpy pictures,
testable without Gradio; :func:`build_app` wires them into a Gradio page, importing Gradio only
when called.

>>> from linearizer.explore import open_run, build_app, launch  # doctest: +SKIP
>>> launch(build_app(open_run("runs/flow-cpu")), host="127.0.0.1", port=7860)  # doctest: +SKIP
"""

from .app import build_app, launch
from .images import MAX_UPLOAD_BYTES, MAX_UPLOAD_PIXELS
from .loading import open_run
from .session import Explorer

__all__ = ["Explorer", "MAX_UPLOAD_BYTES", "MAX_UPLOAD_PIXELS", "build_app", "launch", "open_run"]
