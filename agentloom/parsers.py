"""The API's request parser (REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"] and `ApiView`).

Kept apart from agentloom/api.py: DRF reads its parser setting while `APIView` is defined.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from agentloom.validation import MAX_JSON_DEPTH, json_depth_exceeds


class ApiJSONParser(JSONParser):
    """DRF's JSON parser, refusing bodies nested deeper than MAX_JSON_DEPTH with a 400.

    Python's parser gives up with RecursionError near 1,000 levels (a 2 KB body), and anything
    that walks a value a little less deep (validation, encoding for storage) could as well; no
    request of this API needs more than a few levels.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(self._too_deep) from None
        if json_depth_exceeds(data, MAX_JSON_DEPTH):
            raise ParseError(self._too_deep)
        return data

    _too_deep = f"JSON parse error - nested more than {MAX_JSON_DEPTH} levels deep."
