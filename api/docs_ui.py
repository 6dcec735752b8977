"""The interactive API page: Swagger UI at ``GET /api/docs``, over ``GET /api/v1/openapi.json``.

Swagger UI's static files come from the ``swagger-ui-bundle-v2`` distribution (a dependency) and are
served by the control plane itself, so the page works without internet access (no CDN). Like the
OpenAPI document, the page and its files are open; the requests it sends carry the bearer token
entered under *Authorize*.
"""
from __future__ import annotations

from flask import Blueprint, Response, abort, send_from_directory

DOCS_PATH = "/api/docs"

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>spark-governor API</title>
  <link rel="stylesheet" href="{base}/swagger-ui.css">
  <link rel="icon" type="image/png" href="{base}/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{base}/swagger-ui-bundle.js"></script>
  <script src="{base}/swagger-ui-standalone-preset.js"></script>
  <script>
    window.onload = function () {{
      window.ui = SwaggerUIBundle({{
        url: "/api/v1/openapi.json",
        dom_id: "#swagger-ui",
        deepLinking: true,
        presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
        layout: "StandaloneLayout"
      }});
    }};
  </script>
</body>
</html>
"""

#: the Swagger UI files the page loads (nothing else of the bundle is served)
ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "favicon-32x32.png",
          "favicon-16x16.png", "oauth2-redirect.html")


def swagger_ui_dir() -> str:
    from swagger_ui_bundle import swagger_ui_path

    return str(swagger_ui_path)


def build_docs_blueprint() -> Blueprint:
    bp = Blueprint("api_docs", __name__)

    @bp.get(DOCS_PATH)
    def docs_page():
        return Response(_PAGE.format(base=DOCS_PATH), mimetype="text/html")

    @bp.get(f"{DOCS_PATH}/<path:filename>")
    def docs_asset(filename: str):
        if filename not in ASSETS:
            abort(404)
        return send_from_directory(swagger_ui_dir(), filename, max_age=3600)

    return bp
