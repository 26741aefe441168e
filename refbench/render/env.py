"""The one Jinja environment factory every template render goes through (summary, PR comment,
HTML report, calibration note, nightly trend page), so filters and globals are defined once."""
from __future__ import annotations

from functools import lru_cache

import jinja2

from .. import paths
from ..verdict import Verdict, counts_phrase
from . import format as f

VERDICT_COLOURS = {Verdict.SLOWER: "#cf222e", Verdict.FASTER: "#1a7f37", Verdict.SAME: "#6e7781",
                   Verdict.INCONCLUSIVE: "#bf8700", Verdict.IDENTICAL: "#8c959f",
                   Verdict.NOT_SUPPORTED: "#d0d7de"}


@lru_cache(maxsize=None)
def environment(kind: str = "markdown") -> jinja2.Environment:
    """kind "markdown": no escaping, a template's trailing newline kept (the summary ends with
    one); kind "html": everything escaped, so a scenario named `<script>` stays text. Cached: an
    environment caches its compiled templates, and the PR comment renders its template many
    times to fit the size limit."""
    if kind not in ("markdown", "html"):
        raise ValueError(f"Jinja environment kind {kind!r}: expected 'markdown' or 'html'")
    html = kind == "html"
    env = jinja2.Environment(loader=paths.template_loader(), autoescape=html, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=not html, undefined=jinja2.StrictUndefined)
    env.filters.update(pct=f.fmt_pct, s=f.fmt_s, p=f.fmt_p, ci=f.fmt_ci, md=f.md_escape, secs=f.fmt_seconds,
                       bytes=f.fmt_bytes, vword=lambda v: Verdict(v).word, unknown=f.or_unknown,
                       counts_phrase=counts_phrase)
    # V: templates name a verdict as V.SLOWER, never by spelling it
    env.globals.update(markers={v: v.marker for v in Verdict}, vcolour=VERDICT_COLOURS,
                       verdicts=tuple(Verdict), V=Verdict, DAEMON_WORDS=f.DAEMON_WORDS)
    return env


def render(template: str, **context) -> str:
    """Render one bundled template; .html templates get the escaping environment."""
    kind = "html" if template.endswith(".html.j2") else "markdown"
    return environment(kind).get_template(template).render(**context)
