"""The page's tabs, one module each: ``layout(ws)`` makes the tab's components (inside its ``gr.Tab``) and
returns them; ``wire(...)`` attaches its handlers. :func:`speechtrain.ui.app.build_app` calls them in page order."""
