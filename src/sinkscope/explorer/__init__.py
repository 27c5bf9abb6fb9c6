"""`sinkscope view`: one text's attention as a self-contained, interactive HTML page.

`capture` runs the model once on a BOS-prefixed text and keeps every head's full map and each layer's inputs;
`quantise` packs the maps into a few bytes per entry; `page` computes the per-head and per-layer statistics
(reusing `sinkscope.functional`) and renders `view.html.j2` with the one page builder (`sinkscope.report.page`). The
entry point is `sinkscope.explorer.page.view` (exported as `sinkscope.view`).
"""
