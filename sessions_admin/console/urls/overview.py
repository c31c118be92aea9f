from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import home

urlpatterns = [
    path("", home.home, name="home"),
    path("conversations/", home.conversation_list, name="conversation_list"),
]
