"""Views of a run's results: markdown (summary and PR comment), HTML with SVG charts, CSV, and the
pairing of two saved runs. Every view renders from the results document and computes no
statistics of its own; formatting lives in `format`, the one Jinja environment in `env`.

Kept free of imports so that `config` and `progress` can use `render.format` without loading
Jinja, numpy or the templates.
"""
