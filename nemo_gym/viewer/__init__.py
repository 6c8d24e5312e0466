"""ng_view: browse, filter and compare rollout files in a browser, reading rows by byte offset from an index.

The run's files (rows, failures, manifest, metrics) are read through nemo_gym.run_files. Modules, lowest first:
`row_fields` (what a row says), `columns` (the on-disk column store), `index` (build/open a run's index), `query`
(filters, sorting, paging), `compare` (two runs task by task), `summary` and `transcript` (a row for the table and
in full), `render_*` (HTML), `views` (pages), `app` (HTTP) and `export` (one self-contained file).
"""
