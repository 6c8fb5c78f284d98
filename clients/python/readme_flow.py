"""The README's first steps, through the Python client generated from
openapi/openapi.json (openapi-python-client), against a live server: what a
Python user of Tidings does first. Run by clients/python/run, which generates
the client and starts the server (scripts/with-server).

Every call goes through the generated functions and models except the
stream's body, which no generated client can read as it arrives (an endless
text/event-stream); its ticket comes from the generated call, and the
events it carries are parsed by the generated models."""

import json
import os
import sys
import time

import httpx
from tidings_client import AuthenticatedClient
from tidings_client.api.admin import admin_tenant_create
from tidings_client.api.alerts import alerts_create, alerts_get
from tidings_client.api.auth import user_token_create
from tidings_client.api.events import events_create
from tidings_client.api.feed import (
    feed_counts,
    feed_list,
    feed_mark_read,
    feed_stream_tickets_create,
)
from tidings_client.api.teams import teams_members_put
from tidings_client.models import (
    AlertCreatedOut,
    AlertIn,
    AlertInPayload,
    ChannelName,
    CountsOut,
    EventCreatedOut,
    EventIn,
    EventInPayload,
    FeedItemOut,
    FeedOut,
    MarkIn,
    MemberOut,
    Problem,
    StreamTicketOut,
    TenantCreatedOut,
    TenantIn,
    UserTokenIn,
    UserTokenOut,
    WatermarksOut,
)

URL = os.environ["TIDINGS_URL"]


def expect(reply, status, model):
    """The answer's status and its parsed model, or a failure that shows both."""
    if reply.status_code != status or not isinstance(reply.parsed, model):
        sys.exit(
            f"expected {status} {model.__name__}, got {reply.status_code}: "
            f"{reply.content.decode(errors='replace')}"
        )
    return reply.parsed


def client(token):
    return AuthenticatedClient(base_url=URL, token=token, raise_on_unexpected_status=True)


def main():
    admin = client(os.environ["TIDINGS_ADMIN_TOKEN"])
    tenant = expect(
        admin_tenant_create.sync_detailed(client=admin, body=TenantIn(name="acme")),
        201,
        TenantCreatedOut,
    )
    api = client(tenant.api_key)

    for user in ("alice", "bob"):
        expect(
            teams_members_put.sync_detailed("design", user, client=api), 201, MemberOut
        )

    comment = EventIn(
        team_id="design",
        type_="comment.created",
        actor_id="bob",
        object_id="doc-7",
        payload=EventInPayload.from_dict({"text": "Looks good"}),
    )
    first = expect(
        events_create.sync_detailed(client=api, body=comment, idempotency_key="c-1"),
        201,
        EventCreatedOut,
    )
    # A retry with the same key: the original, not a second event.
    again = expect(
        events_create.sync_detailed(client=api, body=comment, idempotency_key="c-1"),
        200,
        EventCreatedOut,
    )
    assert again.id == first.id, (again, first)

    token = expect(
        user_token_create.sync_detailed(
            client=api, body=UserTokenIn(user_id="alice", ttl_seconds=3600)
        ),
        201,
        UserTokenOut,
    ).token
    alice = client(token)

    feed = expect(feed_list.sync_detailed(client=alice, limit=20), 200, FeedOut)
    assert [item.payload["text"] for item in feed.items] == ["Looks good"], feed
    assert feed.unread_count == 1 and feed.head == first.cursor, feed

    marks = expect(
        feed_mark_read.sync_detailed(client=alice, body=MarkIn(up_to=feed.head)),
        200,
        WatermarksOut,
    )
    assert marks.read == feed.head and marks.unread_count == 0, marks
    counts = expect(feed_counts.sync_detailed(client=alice), 200, CountsOut)
    assert (counts.unread, counts.unseen) == (0, 0), counts

    # The live stream: a ticket from the generated call, then the body read
    # as it arrives. An alert's in-app item reaches it.
    ticket = expect(
        feed_stream_tickets_create.sync_detailed(client=alice), 201, StreamTicketOut
    ).ticket
    overdue = AlertIn(
        event_type="invoice.overdue",
        entity_id="inv-42",
        recipients=["alice"],
        channels=[ChannelName.IN_APP],
        subject="Invoice 42 is overdue",
        payload=AlertInPayload.from_dict({"amount": "120.00"}),
    )
    with httpx.stream(
        "GET", f"{URL}/v1/feed/stream", params={"ticket": ticket}, timeout=10
    ) as stream:
        assert stream.status_code == 200, stream.status_code
        accepted = expect(
            alerts_create.sync_detailed(
                client=api, body=overdue, idempotency_key="inv-42-overdue"
            ),
            202,
            AlertCreatedOut,
        )
        deadline = time.monotonic() + 10
        event = None
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "item":
                item = FeedItemOut.from_dict(json.loads(line.split(":", 1)[1]))
                assert item.type_ == "invoice.overdue", item
                assert item.subject == "Invoice 42 is overdue", item
                break
            assert time.monotonic() < deadline, "no item on the stream within 10 s"

    # Retried with its key: the first answer again.
    replayed = alerts_create.sync_detailed(
        client=api, body=overdue, idempotency_key="inv-42-overdue"
    )
    assert replayed.status_code == 202, replayed.status_code
    assert replayed.headers.get("idempotency-replayed") == "true", replayed.headers
    assert replayed.parsed.alert_id == accepted.alert_id
    alert = alerts_get.sync_detailed(accepted.alert_id, client=api)
    assert alert.status_code == 200, alert.content

    # A problem parses as the generated Problem, its code one of the enum's.
    bad = feed_list.sync_detailed(client=alice, before="not-a-cursor")
    assert bad.status_code == 400 and isinstance(bad.parsed, Problem), bad.content
    assert bad.parsed.code.value == "invalid_cursor", bad.parsed
    print("the README flow ran through the generated Python client")


if __name__ == "__main__":
    main()
