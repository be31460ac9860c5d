"""``evalkit capacity``: the highest load a server carries while a share of its requests meet every SLO
(docs/capacity.md). :mod:`~evalkit.capacity.search` the bracket-and-bisect search and its repeat rule,
:mod:`~evalkit.capacity.points` each load point as an ordinary run through the Runner, :mod:`~evalkit.capacity.run`
the command's settings and the capacity dir it writes (``capacity.json`` through :mod:`evalkit.store.capacity_dir`,
``capacity.html`` through :mod:`evalkit.reporting.capacity_view`)."""
