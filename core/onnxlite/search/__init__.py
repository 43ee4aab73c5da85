"""``onnxlite.lighten``: the search for the lightest model within an accuracy budget (docs/lighten.md).

``lighten`` runs the steps; ``heldout`` splits calibration from judging data;
``candidates`` builds the grid; ``tasks`` quantizes and judges each candidate
in its own process; ``partial`` keeps the worst nodes in float when nothing
fits; ``choose`` picks the winner; ``results`` holds the rows, the result and
its report; ``recipes`` reads and writes ``recipe.toml``.
"""
