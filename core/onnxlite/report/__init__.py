"""One report model (``model``), three renderings (``text``, ``html``, and ``files`` for ``--report DIR``)."""
