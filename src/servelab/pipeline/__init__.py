"""The end-to-end pipeline: ``servelab run`` and ``servelab demo`` compose the other packages."""
