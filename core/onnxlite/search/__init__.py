"""``onnxlite.lighten``: the search for the lightest model within an accuracy budget (docs/lighten.md).

``lighten`` checks the settings and sets up the run (``setup``); ``engine`` judges the candidates
(``candidates`` builds them, ``trials`` runs each as a job through the ``cache``) into the ``table``,
then runs the stages of ``stages/`` in order and benchmarks; ``finish`` chooses and makes the result
(``results``); ``recipes`` reads and writes ``recipe.toml``; ``outdir`` publishes OUTDIR.
"""
