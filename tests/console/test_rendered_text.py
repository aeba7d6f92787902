"""Assistant content is rendered as markdown on the server and sanitized; the journal stays raw."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agentloom.engine.testing import ScriptedGateway
from agentloom.providers import ProviderError
from context_app import engine_adapter
from sessions_app.templatetags.console_text import is_long, render_markdown, thousands
from tests.factories import ask

MARKDOWN = (
    "**Bold** and `code`.\n\n"
    "```python\nprint('<b>hi</b>')\n```\n\n"
    "[safe](https://example.org/a) [bad](javascript:alert(1)) [worse](JAVASCRIPT:alert(2)) "
    "[data](data:text/html,<script>alert(3)</script>)\n\n"
    '<a href="javascript:alert(4)">raw</a> <script>alert(5)</script> <img src=x onerror=alert(6)>'
    "\n\n![pixel](https://tracker.example/p.png)"
)


def test_markdown_is_rendered_and_code_blocks_get_a_copy_button():
    html = render_markdown(MARKDOWN)
    assert "<strong>Bold</strong>" in html and "<code>code</code>" in html
    assert "print('&lt;b&gt;hi&lt;/b&gt;')" in html
    assert 'data-copy="code"' in html and '<span class="code-lang">python</span>' in html


def test_raw_html_images_and_unsafe_links_never_become_markup():
    html = render_markdown(MARKDOWN)
    assert '<a href="https://example.org/a" rel="noopener noreferrer nofollow">safe</a>' in html
    hrefs = re.findall(r'<a [^>]*href="([^"]*)"', html)
    assert hrefs == ["https://example.org/a", "https://tracker.example/p.png"]
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(5)&lt;/script&gt;" in html  # shown as the model wrote it
    assert 'href="https://tracker.example/p.png"' in html  # an image is a link, never loaded


def test_a_fence_language_cannot_smuggle_attributes():
    html = render_markdown('```js" onclick="alert(1)\nx\n```')
    assert "onclick" not in html and 'class="language-js"' in html


def test_table_alignment_is_a_class_never_an_inline_style():
    html = render_markdown("| a | b |\n|:-|-:|\n| 1 | 2 |")
    assert 'class="align-right"' in html and "style=" not in html


def test_long_text_and_thousands():
    assert not is_long("short") and is_long("x" * 1201) and is_long("line\n" * 16)
    assert thousands(150000) == "150,000" and thousands(None) == "" and thousands("a") == "a"


@pytest.mark.django_db
def test_the_chat_renders_answers_as_markdown_and_the_journal_keeps_them_raw(
    client_for, session, alice
):
    ask(session, alice, "# Title\n\n**NONCE-BOLD** [x](javascript:alert(1))")
    client = client_for(alice)
    chat = client.get(reverse("console-chat", args=[session.pk])).content.decode()
    answer = chat[chat.index('class="msg answer"') :]
    assert "<strong>NONCE-BOLD</strong>" in answer
    assert 'href="javascript' not in chat
    assert 'data-copy="message"' in answer
    journal = client.get(reverse("console-journal", args=[session.pk])).content.decode()
    assert "**NONCE-BOLD**" in journal and "<strong>NONCE-BOLD</strong>" not in journal


@pytest.mark.django_db
def test_long_questions_are_collapsed_with_show_all(client_for, session, alice):
    ask(session, alice, "NONCE-LONG" + " word" * 400)
    chat = client_for(alice).get(reverse("console-chat", args=[session.pk])).content.decode()
    question = chat[chat.index('class="msg question"') :]
    assert 'class="text-block collapsed"' in question
    assert "Show all (2,010 characters)" in question


@pytest.fixture
def failing_model():
    """A model whose provider refuses the key."""
    script = ScriptedGateway([ProviderError("auth", status=401)])
    engine_adapter.set_gateway_factory(lambda version, connection: script)
    yield script
    engine_adapter.set_gateway_factory(None)


@pytest.mark.django_db
def test_a_run_error_links_to_the_model_connection(client_for, session, alice, failing_model):
    run = ask(session, alice, "hello")
    assert run.status == "failed"
    connection = session.agent_version.model_connection
    link = reverse("admin:models_app_modelconnection_change", args=[connection.pk])
    chat_url = reverse("console-chat", args=[session.pk])
    assert link not in client_for(alice).get(chat_url).content.decode()  # not staff
    alice.is_staff = True
    alice.save()
    client = client_for(alice)
    html = client.get(chat_url).content.decode()
    status_line = html[html.index('class="status-line"') :].split("</p>")[0]
    assert "The provider rejected the credentials." in status_line and link in status_line
    panel = client.get(reverse("console-run-panel", args=[run.pk])).content.decode()
    assert link in panel
