"""Every rendering of findings but the report: an analysis as text (terminals) or JSON
(machines), a gate result as text, JSON, JUnit, GitHub workflow commands or Markdown
(:mod:`trainlens.formatters.gate` picks one). Renderers compute nothing."""
