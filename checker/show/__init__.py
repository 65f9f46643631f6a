"""Showing traces to people, and writing them down: the ITF trace format (itf.py), the text
timeline (text.py), an engine-neutral timeline (timeline.py), the inputs it is drawn from
(sources.py), and its renderings (svg.py, markdown.py, report.py for the HTML report of
`batchproof check --html`)."""
