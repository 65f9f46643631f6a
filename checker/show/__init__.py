"""Showing traces to people: an engine-neutral timeline (timeline.py), the inputs it is
drawn from (sources.py), and its renderings (svg.py, markdown.py, report.py for the HTML
report of `batchproof check --html`). The text rendering stays in checker/render.py."""
