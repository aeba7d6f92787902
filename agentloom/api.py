"""What every REST endpoint shares: the exception handler, paging, the base view, schema helpers.

API.md is the contract: JSON only, 401 for anonymous callers, 404 for anything outside the
caller's reach, `{"field": ["..."]}` or `{"detail": "..."}` for errors, and no input that ends in a
500.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import (
    ObjectDoesNotExist,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.core.exceptions import (
    ValidationError as DjangoValidationError,
)
from django.http import Http404
from django.urls import URLPattern, re_path
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from agentloom.errors import ApplicationError, NotFound, RateLimited
from agentloom.parsers import ApiJSONParser
from agentloom.validation import is_single_line, text_pattern

# Primary keys are 64-bit; a larger number in a path or body must answer 404/400, not overflow.
MAX_ID = 2**63 - 1
_ID = re.compile(r"[0-9]{1,19}")


# --- errors ------------------------------------------------------------------------------------


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Return the JSON answer for `exc`: application errors, DRF errors and Django's own."""
    if isinstance(exc, RateLimited):
        return Response(
            exc.as_json(), status=exc.status, headers={"Retry-After": str(exc.retry_after)}
        )
    if isinstance(exc, ApplicationError):
        return Response(exc.as_json(), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"detail": "Request body is too large."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, SuspiciousOperation):
        return Response({"detail": "Bad request."}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ObjectDoesNotExist):
        exc = Http404()
    if isinstance(exc, DjangoValidationError):
        return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


def object_id(raw: str) -> int:
    """Return `raw` as a primary key; anything that cannot be one is simply not found."""
    if not _ID.fullmatch(raw) or int(raw) > MAX_ID:
        raise NotFound("Not found.")
    return int(raw)


# --- base classes ------------------------------------------------------------------------------


class ApiPagination(LimitOffsetPagination):
    """`limit` (1–200, default 50) and `offset` (≥ 0); anything else is a 400 naming the field.

    DRF would silently replace a bad value; refusing it keeps lists consistent with the journal
    cursor and with what the schema says.
    """

    default_limit = 50
    max_limit = 200

    def get_limit(self, request) -> int:
        field = QueryIntegerField(min_value=1, max_value=self.max_limit)
        return _query_int(request, self.limit_query_param, self.default_limit, field)

    def get_offset(self, request) -> int:
        return _query_int(request, self.offset_query_param, 0, QueryPositionField())

    def get_schema_operation_parameters(self, view):
        limit, offset = super().get_schema_operation_parameters(view)
        limit["schema"].update(minimum=1, maximum=self.max_limit, default=self.default_limit)
        offset["schema"].update(
            minimum=0,
            default=0,
            description="Rows to skip; an offset beyond the last row is an empty page.",
        )
        return [limit, offset]


def _query_int(request, name: str, default: int, field: serializers.IntegerField) -> int:
    if name not in request.query_params:
        return default
    try:
        return field.run_validation(request.query_params[name])
    except serializers.ValidationError as error:
        raise serializers.ValidationError({name: error.detail}) from None


class QueryIntegerField(serializers.IntegerField):
    """An integer query parameter written in digits only: DRF alone would take `0.0` or ` 7`."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        if isinstance(data, str) and not _DIGITS.fullmatch(data):
            self.fail("invalid")
        return super().to_internal_value(data)


_DIGITS = re.compile(r"-?[0-9]{1,20}")


class QueryPositionField(QueryIntegerField):
    """A position in an ordered list (`after`, `offset`): ASCII digits of any length, ≥ 0.

    A position beyond every row is simply the end of the list, however large: values past
    `MAX_ID` read as `MAX_ID`, so they never overflow a 64-bit column.
    """

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 0)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and _POSITION.fullmatch(data):
            digits = data.lstrip("0") or "0"
            # Compared by length first: Python refuses to convert very long digit strings.
            return MAX_ID if len(digits) > len(str(MAX_ID)) else min(int(digits), MAX_ID)
        return min(super().to_internal_value(data), MAX_ID)


_POSITION = re.compile(r"[0-9]+")


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's schema, with bodies that must carry one of several fields required.

    Left to itself it makes a body with no required field optional, though an absent body
    carries none of the fields `StrictSerializer.required_any_of` asks for.
    """

    def _get_request_for_media_type(self, serializer, direction="request"):
        schema, required = super()._get_request_for_media_type(serializer, direction)
        target = serializer if isinstance(serializer, type) else type(serializer)
        if issubclass(target, StrictSerializer) and target.required_any_of:
            required = True
        return schema, required


class ApiView(APIView):
    """JSON in, JSON out, authenticated callers only."""

    # DRF reads JSON bodies through `request.body`, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE
    # applies and an oversized body raises RequestDataTooBig (answered 413 above).
    parser_classes = [ApiJSONParser]
    renderer_classes = [JSONRenderer]
    permission_classes = [IsAuthenticated]
    # Read by drf-spectacular too: list answers are documented as pages with limit/offset.
    pagination_class = ApiPagination
    schema = ApiAutoSchema()

    def paginated(
        self,
        queryset,
        serializer_class: type[serializers.Serializer],
        context: dict[str, Any] | None = None,
    ) -> Response:
        """Return one DRF page `{count, next, previous, results}` of `queryset`."""
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        data = serializer_class(page, many=True, context=context or {}).data
        return paginator.get_paginated_response(data)


class StrictSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know, naming the first one.

    `required_any_of` lists groups of fields of which a body must carry at least one group
    (`validate` enforces it; the schema says it as `anyOf`).
    """

    unknown_field_message = "Unknown field."
    required_any_of: tuple[tuple[str, ...], ...] = ()

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: [self.unknown_field_message]})
        return super().to_internal_value(data)


class StrictSerializerSchema(OpenApiSerializerExtension):
    """Say in the schema what StrictSerializer enforces: no additional properties."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        target = self.target if isinstance(self.target, type) else type(self.target)
        fields = self.target.fields if not isinstance(self.target, type) else target().fields
        for name, field in fields.items():
            if _declares_text_rule(field) and name in schema["properties"]:
                schema["properties"][name]["pattern"] = text_pattern(
                    trimmed=field.trim_whitespace,
                    blank=field.allow_blank,
                    single_line=getattr(field, "single_line", False),
                )
            # drf-spectacular leaves a nested list's length limits out of the schema.
            if isinstance(field, serializers.ListSerializer) and name in schema["properties"]:
                if field.max_length is not None:
                    schema["properties"][name]["maxItems"] = field.max_length
                if field.min_length is not None:
                    schema["properties"][name]["minItems"] = field.min_length
        if target.required_any_of:
            schema["anyOf"] = [{"required": list(group)} for group in target.required_any_of]
        if not target.__dict__.get("__doc__"):
            # Otherwise every input shape would be described by this base class's docstring.
            schema.pop("description", None)
        return schema


def _declares_text_rule(field: serializers.Field) -> bool:
    # A regex field declares its own pattern; every other text field refuses NUL, and blanks
    # unless it allows them, which the schema cannot say without a pattern.
    return isinstance(field, serializers.CharField) and not isinstance(
        field, serializers.RegexField
    )


# DRF coerces JSON values it is given (12 -> "12", "12" -> 12, "yes" -> True); a JSON body must
# carry the type the schema says, so these body fields take their own type only.


class TextField(serializers.CharField):
    """A string field that takes only strings and measures them as sent (before trimming).

    `single_line` text holds no control or invisible format character once trimmed
    (`agentloom.validation.CONTROLS`). The schema declares each field's rule as a pattern
    (`text_pattern`), NUL and blanks included.
    """

    default_error_messages = {"controls": "Must not contain control characters."}

    def __init__(self, *, single_line: bool = False, **kwargs):
        self.single_line = single_line
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        value = super().to_internal_value(data)
        if self.single_line and not is_single_line(value):
            self.fail("controls")
        return value


class WholeNumberField(serializers.IntegerField):
    """An integer field that takes only JSON integers."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class FlagField(serializers.BooleanField):
    """A boolean field that takes only true and false."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


def id_field(**kwargs) -> serializers.IntegerField:
    """Return an integer field for a primary key in a request body."""
    return WholeNumberField(min_value=1, max_value=MAX_ID, **kwargs)


# --- routes ------------------------------------------------------------------------------------


def endpoint(route: str, view: type[APIView], name: str) -> URLPattern:
    """Return a URL pattern for `route` (contract spelling) that also matches the other slash form.

    `{id}` (and any other `{name}`) takes any segment: the view parses it, so a malformed id
    answers a JSON 404 like a missing one. `/?` renders as "/" and `(?:/)?` as nothing in the
    schema, which keeps the contract's spelling there.
    """
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", route)
    regex = regex[:-1] + "/?" if regex.endswith("/") else regex + "(?:/)?"
    return re_path(f"^{regex}$", view.as_view(), name=name)


# --- schema helpers ----------------------------------------------------------------------------


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


_ERRORS = {
    400: OpenApiResponse(
        OpenApiTypes.OBJECT,
        description='Bad input: `{"field": ["message"]}` or `{"detail": "message"}`.',
    ),
    401: OpenApiResponse(DetailSerializer, description="Not authenticated."),
    403: OpenApiResponse(
        DetailSerializer,
        description="Only a space admin may do this, or (session auth) the CSRF token is missing.",
    ),
    404: OpenApiResponse(DetailSerializer, description="Missing or outside the caller's reach."),
    409: OpenApiResponse(DetailSerializer, description="The object's state forbids this."),
    413: OpenApiResponse(DetailSerializer, description="Request body is too large."),
    415: OpenApiResponse(DetailSerializer, description="The body must be application/json."),
    502: OpenApiResponse(
        DetailSerializer, description="An upstream server failed; the detail is fixed text."
    ),
}
# Every endpoint answers 401 to anonymous callers; every body can be malformed or too large.
_ALWAYS = (401,)
_BODY = (400, 413, 415)


def api_schema(
    *,
    ok: int,
    response: Any,
    errors: tuple[int, ...] = (),
    request: Any = None,
    description: str = "",
    path_id: str | None = None,
    parameters: list | None = None,
    **kwargs: Any,
):
    """Return a decorator documenting a view method: its success answer and each error it gives."""
    codes = set(_ALWAYS) | set(errors)
    if request is not None:
        codes |= set(_BODY)
    if isinstance(response, serializers.ListSerializer):
        codes.add(400)  # a bad limit or offset
    params = list(parameters or [])
    if path_id:
        params.append(OpenApiParameter("id", int, OpenApiParameter.PATH, description=path_id))

    def decorate(method):
        # A write with session (cookie) auth and no CSRF token is refused with 403.
        method_codes = codes | {403} if method.__name__ != "get" else codes
        # A dict answers `ok` in each of its media types (a download's formats).
        answers = (
            {(ok, media): kind for media, kind in response.items()}
            if isinstance(response, dict)
            else {ok: response}
        )
        responses = {**answers, **{code: _ERRORS[code] for code in sorted(method_codes)}}
        return extend_schema(
            request=request,
            responses=responses,
            description=description,
            parameters=params,
            **kwargs,
        )(method)

    return decorate
