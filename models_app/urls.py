"""Model-connection API routes (mounted under /api/)."""

urlpatterns: list = []
