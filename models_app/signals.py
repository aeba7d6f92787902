"""What leaving ends: a tool server's OAuth connections go with it, and a member's with them.

Deleting a tool server (by the API, the admin, or with its space) and removing a member from a
space (or deleting the user) delete the OAuth connections concerned and revoke their tokens at
the authorization server once the deletion committed (`oauth_revoke_later`). Receivers, because
memberships live below this app and are removed by the admin and by user deletion alike.
"""

from __future__ import annotations

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from agentloom.spaces.models import Membership
from models_app.models import OAuthConnection, ToolServer
from models_app.services.tool_server_oauth import member_connections_removed, oauth_revoke_later


@receiver(pre_delete, sender=ToolServer, dispatch_uid="tool_server_oauth_revoked")
def revoke_server_connections(sender, instance: ToolServer, **kwargs) -> None:
    oauth_revoke_later(OAuthConnection.objects.filter(server=instance))


@receiver(pre_delete, sender=Membership, dispatch_uid="member_oauth_revoked")
def revoke_member_connections(sender, instance: Membership, **kwargs) -> None:
    member_connections_removed(space_id=instance.space_id, user_id=instance.user_id)
