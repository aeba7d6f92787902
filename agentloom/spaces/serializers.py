"""Shapes of spaces and memberships in the REST API."""

from __future__ import annotations

from rest_framework import serializers

from agentloom.api import StrictSerializer, TextField
from agentloom.spaces.models import Membership


class SpaceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    role = serializers.ChoiceField(
        choices=Membership.Role.choices, help_text="The caller's role in the space."
    )
    created_at = serializers.DateTimeField()


class SpaceCreateSerializer(StrictSerializer):
    name = TextField(max_length=120)


class MembershipSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    space = serializers.IntegerField(source="space_id")
    user = serializers.IntegerField(source="user_id")
    username = serializers.CharField(source="user.username")
    role = serializers.ChoiceField(choices=Membership.Role.choices)
    created_at = serializers.DateTimeField()


class MembershipCreateSerializer(StrictSerializer):
    username = TextField(
        max_length=150,
        help_text="The username of an existing user; one that names no user is refused (400).",
    )
    role = serializers.ChoiceField(choices=Membership.Role.choices)
