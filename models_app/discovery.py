"""List a provider's models for the model page, without saving anything."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from agentloom.errors import InvalidInput, PermissionDenied, UpstreamError
from agentloom.providers import ClientFactory, DiscoveredModel, ProviderError, discover_models
from agentloom.ratelimit import limit
from agentloom.spaces.selectors import administered_spaces, require_space_admin
from models_app.selectors import connection_get
from models_app.services import (
    KEY_REQUIRED,
    clean_api_key,
    clean_base_url,
    clean_provider,
    same_endpoint,
)

logger = logging.getLogger(__name__)


def models_discover(
    *,
    user,
    provider: Any,
    base_url: Any = "",
    api_key: Any = None,
    resource_id: int | None = None,
    client_factory: ClientFactory | None = None,
) -> list[DiscoveredModel]:
    """Return the models `provider` at `base_url` offers; the key is used once, never stored.

    With `resource_id` and a blank key, the stored key of that connection is used, but only
    for the provider and base URL it was entered for.
    """
    # Each call is an outbound request to an address an admin typed: counted before anything.
    limit("discovery", user.pk, what="model listings")
    provider = clean_provider(provider)
    base_url = clean_base_url(provider, base_url)
    key = clean_api_key(api_key)
    if resource_id is not None:
        connection = connection_get(user=user, connection_id=resource_id)
        require_space_admin(user, connection.space_id)
        if not key and connection.api_key and provider != "local":
            if not same_endpoint(connection, provider, base_url):
                raise InvalidInput(
                    "Enter the API key: the saved key is used only with the provider and base "
                    "URL it was saved for.",
                    field="api_key",
                )
            key = connection.api_key
    elif not administered_spaces(user).exists():
        # Only someone who may create a connection has a reason to make the server call out.
        raise PermissionDenied("Only a space admin may list a provider's models.")
    if not key and provider in KEY_REQUIRED:
        # Said here rather than by the provider's 401 after a round trip.
        raise InvalidInput(
            "Enter the API key first: this provider lists its models only for a key.",
            field="api_key",
        )
    try:
        return discover_models(
            provider,
            base_url,
            key or None,
            allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS,
            client_factory=client_factory,
        )
    except ProviderError as error:
        # The kind and status only: the message is fixed text, but say no more than needed.
        logger.info(
            "model discovery failed: provider=%s kind=%s status=%s",
            provider,
            error.kind,
            error.status,
        )
        if error.kind == "address_refused":
            raise InvalidInput(error.message, field="base_url") from None
        raise UpstreamError(error.message) from None
