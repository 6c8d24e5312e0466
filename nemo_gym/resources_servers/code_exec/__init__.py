"""code_exec: run model-written Python against a problem's tests in a bubblewrap sandbox (see app.py)."""
