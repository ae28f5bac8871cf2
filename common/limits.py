"""Every bound in the system, in one place.

A queue, payload, batch or wait that is not named here is a bug. Code that
hits a limit raises a typed error from :mod:`common.errors`, and the name of
the limit appears in the error so an operator can find it here. Two queues
are not in front of a client and shed instead, never silently: the per-peer
link queue (``replicate_queue_ops_max``; counted in
``peer_queue_dropped_total``, repaired by anti-entropy) and the webhook
intake (``webhook_intake_ops_max``; counted in ``webhook_dropped_total``). Values are plain module constants so the pure core can import
them without I/O; settings may override a few of them per node, and those
are marked "(setting)".
"""

from __future__ import annotations

# --- HTTP boundary ---------------------------------------------------------
request_body_max_bytes = 2 * 1024 * 1024  # bigger bodies get 413
bulk_create_max = 1000  # memories per POST /memories/bulk

# --- identifiers -----------------------------------------------------------
agent_id_max_chars = 128  # agent ids: 1..128 of [A-Za-z0-9_\-:@./]
scope_name_max_chars = 128  # workspace / project / harness names
request_id_max_chars = 128  # pop request ids, Idempotency-Key values
api_key_max_chars = 512  # a presented key longer than this is unknown without a lookup
op_kind_max_chars = 64  # an op kind name (a newer version's kinds are kept, not applied)
namespace_max_chars = 512
tag_max_chars = 128
tags_max = 64
agent_type_max_chars = 128
capabilities_max = 64  # per registered agent
capability_max_chars = 128

# --- memories --------------------------------------------------------------
memory_title_max_chars = 1_000
memory_content_max_chars = 1_000_000
memory_metadata_max_bytes = 64 * 1024
memory_list_limit_default = 50
memory_list_limit_max = 1000
# With lanes a listing whose offset + limit is at most this asks every lane
# for its first offset + limit memories and merges them; a deeper page first
# finds where it starts by merging the lanes' keys, this many a read per lane.
memory_list_fanout_max = 10_000
memory_list_keys_chunk = 5_000
memory_source_max_chars = 128
memory_scope_max_chars = 64
memory_ttl_secs_max = 100 * 365 * 24 * 3600  # ttl_secs beyond a century is a typo
# Default lifetime of a memory by tier: seconds, None = never expires.
memory_tier_ttl_secs: dict[str, int | None] = {"short": 6 * 3600, "mid": 7 * 24 * 3600, "long": None}

# --- search, links, admin (the upstream SDK surface) -------------------------
search_limit_default = 20
search_limit_max = 200
recall_limit_default = 10
recall_limit_max = 50
search_query_max_chars = 4_000
search_terms_max = 32  # words of a query that reach FTS5; more is a 400
all_keys_pull_max = 10_000  # ops one peer returns for a cluster-wide read barrier
forget_max = 10_000  # memories one POST /forget may delete (more: 413, nothing deleted)
purge_memories_max = 10_000  # memories one project or workspace purge deletes (more: run it again)
purge_projects_max = 1_000  # projects one workspace purge takes (more: 413, nothing purged)
purge_reason_max_chars = 500  # the reason an operator gives for a purge (kept in the audit)
# The scheduled cleanup of empty projects (daemon/services/purge.py): how
# often a node looks, and how long a project must have been idle first.
empty_project_cleanup_interval_secs = 3600
empty_project_idle_secs = 30 * 86_400
gc_batch_max = 10_000  # expired memories one POST /gc tombstones
link_relation_max_chars = 64
links_per_memory_max = 1_000  # links GET /links/{id} returns
lineage_depth_max = 5
lineage_nodes_max = 1_000
import_memories_max = 1000  # memories per POST /import (as bulk_create_max)
import_links_max = 10_000
consolidate_ids_max = 100
export_memories_max = 100_000  # beyond this GET /export is a 413 (use list/paging)
expiring_soon_secs = 24 * 3600  # "expiring_soon" in GET /stats

# --- notify / inbox --------------------------------------------------------
notify_title_max_chars = 1_000
notify_payload_max_chars = 64_000
notify_priority_min = 1
notify_priority_max = 10
notify_priority_default = 5
notify_broadcast_max = 500  # recipients of one notify (a list, or "*" / "prefix*")
inbox_limit_default = 50
inbox_limit_max = 500
mark_read_ids_max = 500
# A search in the _inbox/<agent> namespace (notifications read as memories,
# daemon/services/inbox_view.py) looks at this many notifications at most.
inbox_view_scan_max = 10_000
# Lifetime of a notification by tier (setting): seconds, None = never expires.
tier_ttl_secs: dict[str, int | None] = {"short": 6 * 3600, "mid": 7 * 24 * 3600, "long": None}
expired_purge_interval_secs = 60.0
agent_seen_refresh_secs = 60.0  # replicate last_seen at most this often per agent
agent_seen_tracked_max = 100_000  # agents the last_seen throttle remembers per node

# --- push streams (SSE: /inbox/stream, /messages/stream) ------------------
streams_max = 256  # (setting [streams].max) open streams per node; beyond it 503 + Retry-After
stream_queue_max = 256  # (setting) events waiting for one slow client; overflow ends its stream with a resume event
stream_queue_bytes_max = 1 << 20  # (setting) ... and their text, summed; so a node holds at most streams_max MiB of queued events
stream_heartbeat_secs = 15.0  # (setting) a comment line this often on an idle stream
stream_write_timeout_secs = 10.0  # (setting) one write to a client that does not read; then the stream is dropped
stream_disconnect_poll_secs = 0.2  # how often the node looks for streams whose client went away
stream_replay_page = 50  # rows per store read while a resumed stream replays what it missed (at most ~3 MiB of notifications)
stream_cursor_max_chars = 4096  # a Last-Event-ID longer than this is a 400
stream_cursor_origins_max = 64  # origins one Last-Event-ID may name
stream_owed_record_max_chars = 128  # the record id a Last-Event-ID may name as owed the rest of its events
stream_retry_ms = 1000  # the SSE "retry:" a client waits before reconnecting
stream_refused_retry_after_secs = 2.0  # Retry-After on the 503 when every stream slot is taken
cli_wait_pop_settle_secs = 3.0  # `pop --wait`: keep trying to claim a message the stream announced while its send round completes
cli_wait_read_secs = 30.0  # `--wait`: longest silence on a stream before the CLI reconnects (> heartbeat)
listen_concurrency_default = 4  # `listen --exec`: commands running at once
listen_concurrency_max = 64  # ... at most
listen_timeout_default_secs = 300.0  # `listen --exec`: one run of the command, then it is killed
listen_retries_default = 3  # `listen --exec`: runs after the first failed one, then the event is dead-lettered
listen_retries_max = 20  # ... at most
listen_retry_backoff_max_secs = 30.0  # `listen`: longest wait between two runs of a failed command
listen_handled_ids_max = 2048  # `listen`: ids of finished events its state file keeps to drop repeats (>> listen_concurrency_max, the most that finish out of order)
listen_connect_timeout_secs = 10.0  # `listen`: a node that has not answered a stream's request by then (paused, cut off) is left for the next
listen_reconnect_wait_max_secs = 5.0  # `listen`: longest wait before trying the next node again

# --- project mail ----------------------------------------------------------
mailbox_pending_max = 256  # pending messages per recipient mailbox (exact)
mailbox_history_load_max = 10_000  # decided messages an owner loads at takeover (request-id retries)
mailbox_empty_decisions_max = 10_000  # "nothing pending" pop decisions an owner keeps (and loads) per mailbox
pop_empty_keep_secs = 3600.0  # a node keeps a "nothing pending" pop decision this long, then purges it
mailbox_request_ttl_secs = 1200.0  # a forwarded mailbox request older than this (sender's clock) is refused
message_subject_max_chars = 200
message_body_max_chars = 8_000
message_evidence_max_chars = 2_000
completion_note_max_chars = message_body_max_chars  # a completion's note is capped like a body
claim_lease_secs_min = 1  # a pop --lease shorter than this is refused (no time to renew)
claim_lease_secs_max = 24 * 3600  # and one longer than a day (a lease is not a terminal claim)
lease_sweep_secs = 1.0  # how often a node looks for leases whose owner has not expired them
lease_sweep_grace_ms = 1500  # a lease this far past its deadline gets an owner to expire it
lease_sweep_mailboxes_max = 1000  # mailboxes one sweep looks at (the most overdue first)
lease_sweep_backoff_max_secs = 300.0  # a mailbox whose owner says nothing is due waits up to this
message_list_limit_default = 50
message_list_limit_max = 200
admission_timeout_ms = 2000  # one deciding admission hook call (setting per hook)
admission_timeout_max_ms = 10_000
admission_hooks_max = 16
admission_reply_max_bytes = 64 * 1024
approval_reason_max_chars = 500  # an approver's or a decider's reason, cut to this
approvals_list_max = 256  # messages one `approvals list` answers (a mailbox holds at most 256)
truncation_marker = "\n[…truncated by ai-memory]"
truncation_marker_inline = " […truncated by ai-memory]"  # one-line fields (a mail subject)

# --- handoffs and the project brief (GET /handoff) -------------------------
handoff_pending_max = 16  # pending handoffs per project (a write retracts older ones)
handoff_body_max_chars = 8_000  # a handoff's text; longer is truncated with a marker
brief_budget_bytes_default = 8 * 1024  # the compiled brief's size (UTF-8) when none is asked
brief_budget_bytes_max = 64 * 1024  # the most a caller may ask for
brief_budget_bytes_min = 512  # the least (the header and one excerpt fit)
brief_excerpt_bytes = 320  # each page's excerpt when its whole body does not fit
brief_pages_max = 200  # pinned / _rules/ / _slots/ pages considered per brief
brief_recent_max = 10  # recent-page pointers

# --- store -----------------------------------------------------------------
writer_queue_max = 10_000  # pending write jobs before callers get 503 overloaded
writer_batch_max = 512  # jobs folded into one SQLite transaction
# A batch of at most this many ops (small writes only) commits on the event
# loop itself: cheaper than the hop to the writer thread and back when the
# node is not busy enough to group writes (store/writer.py).
writer_inline_ops_max = 8
# The write connection checkpoints its WAL on the writer thread (SQLite's own
# autocheckpoint, off on that connection, would run inside whichever commit
# crossed 1,000 pages, on the event loop too): first after this many ops,
# then after as many as wrote about wal_checkpoint_frames WAL frames last
# time, within the bounds below; and after any write of unbounded size.
wal_checkpoint_ops = 200
wal_checkpoint_frames = 1_000
wal_checkpoint_ops_min = 16
wal_checkpoint_ops_max = 4_096
store_read_connections = 2  # pooled read-only SQLite connections per node
known_projects_cached_max = 100_000  # projects a node remembers exist (beyond: read from SQLite)
store_busy_timeout_ms = 5000  # SQLite busy_timeout on every connection
mailbox_load_attempts_max = 5  # reads of a mailbox's state before the node fail-stops
mailbox_load_retry_base_secs = 0.05  # first wait between those reads; doubles per attempt

# --- the process -----------------------------------------------------------
# Young container objects allocated (net) before a generation-0 collection.
# CPython's default, 700, is crossed by the requests one node has in flight
# alone, so it collected on every few requests without finding garbage.
gc_young_objects_max = 10_000
gc_older_every = 10  # collections of one generation before the next older one (CPython's)

# --- lanes (docs/lanes.md, daemon/lanes/) ---------------------------------------
lanes_max = 256  # lane processes per node (the partition function allows 1024)
lane_port_offset_default = 100  # lane i of a member listens on its port + offset x (i + 1)
# `lanes resize` waits this long for a node that is still stopping to let go
# of its files before it says the node runs
resize_lock_wait_s = 3.0
lane_hop_timeout_secs = 30.0  # a request handed to a sibling lane (its own deadlines are shorter)
lane_restart_backoff_max_secs = 10.0  # the supervisor restarts a lane that exited, waiting up to this
lane_ready_timeout_secs = 600.0  # the supervisor waits this long for every lane to serve
lane_fanout_concurrency = 64  # sibling lanes one fan-out asks at once

# --- federation ------------------------------------------------------------
quorum_timeout_ms_default = 2000  # (setting) --quorum-timeout-ms
catchup_interval_secs_default = 2.0  # (setting) --catchup-interval-secs
replicate_batch_ops_max = 1000  # operations in one peer request
replicate_queue_ops_max = 200_000  # operations queued for one peer before backpressure
peer_link_inflight_max = 1  # batched requests in flight to a near peer (what queues meanwhile is the next batch)
peer_link_inflight_far_max = 32  # ... to a far peer (docs/federation.md, daemon/peer/pacing.py)
peer_link_inflight_http_max = 4  # ... to a far peer without the channel (each request takes a pooled connection)
peer_link_far_rtt_ms = 20.0  # a peer whose fastest recent lone request took this long is far
peer_link_sample_bytes_max = 64 * 1024  # only requests this small time the network (a big one times the peer's work)
peer_link_rtt_window_secs = 10.0  # the fastest request of the last one to two such windows is a link's floor
peer_connections_per_host_max = 16  # pooled HTTP connections to one peer
peer_keepalive_secs = 30.0  # idle pooled peer connections close after this
tick_secs = 0.02  # how often the node ticks the core (timeouts, sync offers, GC)
sync_batch_ops_max = 5000  # operations in one anti-entropy push
sync_push_grace_secs = 0.5  # ops this node took in more recently are in flight to the peer: a push waits until it lacks older ones (daemon/replication/anti_entropy.py)
sync_since_limit_max = 10_000  # GET /sync/since?limit=
peer_request_timeout_secs = 5.0  # any single peer HTTP call
peer_channel_enabled = True  # batched peer messages as frames on one WebSocket per peer
peer_channel_retry_secs = 30.0  # a peer without the channel (older version) gets HTTP this long
peer_channel_heartbeat_secs = 20.0  # ping an idle peer channel; no pong in half of it closes it
peer_body_max_bytes = 64 * 1024 * 1024  # msgpack peer bodies
peer_channel_frames_serving_max = 64  # frames one peer channel serves at once; beyond it the receiver stops reading (TCP backpressure)
peer_batch_bytes_max = 8 * 1024 * 1024  # op bytes one push, pull answer or peer batch carries (a larger batch is split)
forward_hops_max = 2  # a forwarded mailbox request may be re-forwarded this often
read_hedge_ms = 100  # a read-quorum pull not answered by then (or twice its round trip, if longer): ask the next peer too
read_hedge_max_ms = 500  # ... but never later than this (a stale or huge round trip must not keep a stalled peer from being hedged)
read_near_band_ms = 20  # read-quorum pulls ask peers nearer by this much first (federation/read.py)
peer_down_after_secs = 3.0  # no contact this long and a peer counts as down
recovery_query_interval_ms = 200  # a recovering member asks the others for their state this often
recovery_grace_ms = 3000  # ... first after this long, so its previous process's messages have landed
reseeding_hold_ms = 300_000  # a Reseeding stops GC over its member until its query, or this long at most
retired_incarnations_max = 16  # per member: replaced disks whose late messages a node still drops
claim_timeout_ms = 2000  # waiting for a majority to accept a claim or an epoch
# A forwarded mailbox request waits for the owner's claim round plus one peer call.
forward_timeout_secs = claim_timeout_ms / 1000 + peer_request_timeout_secs
auth_clock_skew_max_secs = 900  # signed peer requests further off than this are refused (tolerates minutes of skew)
auth_nonce_cache_max = 100_000
gc_interval_secs = 30.0
mailbox_owner_idle_secs = 300.0  # an owner drops an idle mailbox's model (re-acquired on demand)
# A member with no database asks the others what they hold before it serves
# (federation/bootstrap.py, daemon/replication/joining.py).
cluster_id_max_chars = 64
# A lane's cluster id is the cluster's plus ".lane<i>of<L>p<V>" (daemon/lanes/layout.py).
lane_cluster_id_max_chars = cluster_id_max_chars + 24
join_probe_timeout_secs = 2.0  # one probe of one member
join_retry_first_secs = 0.2  # the first wait between rounds of probes ...
join_retry_max_secs = 5.0  # ... doubling up to this
join_log_every_secs = 30.0  # the same wait is logged again after this long
join_systemd_extend_secs = 60.0  # each round extends systemd's start timeout by this
hello_collected_origins_max = 1_024  # origins a /peer/v1/hello answer's "collected" may name
mailbox_requests_max = 512  # requests waiting at one mailbox owner; beyond it: 503 + Retry-After (sheds load before clients give up)

# --- webhooks --------------------------------------------------------------
webhook_timeout_secs = 5.0
webhook_retry_max = 8
webhook_backoff_max_secs = 60.0
webhook_outbox_max = 100_000
subscriptions_max = 1000
webhook_backoff_base_secs = 1.0  # first retry delay; doubles per attempt up to webhook_backoff_max_secs
webhook_concurrency_max = 16  # webhook POSTs in flight per node (one per subscription at a time)
webhook_dead_letter_max = 10_000  # dead-lettered outbox rows kept; beyond it the oldest are purged (counted)
webhook_intake_ops_max = 100_000  # applied ops waiting in memory to become outbox rows; overflow is refused, counted (webhook_dropped_total) and logged
webhook_url_max_chars = 2048
webhook_secret_max_chars = 256
webhook_events_text_max_chars = 1024  # a comma-separated events string (upstream's form)
webhook_versions_prune_secs = 600.0  # how often expired rows leave the webhook memory-version table
webhook_intake_batch_ops = 5000  # applied ops folded into one outbox intake transaction
webhook_burst_rows = 64  # rows one subscription delivers back to back before yielding its slot
webhook_error_pause_secs = 1.0  # after an unexpected dispatcher error, before its loop tries again
webhook_error_text_max_chars = 500  # last-error text kept per outbox row
admission_connections_max = 32  # pooled HTTP connections to admission hooks

# --- Backup ----------------------------------------------------------------
backup_chunk_bytes = 1 << 20  # POST /api/v1/admin/backup streams the copy in pieces this big
backup_http_timeout_secs = 600.0  # `ai-memory backup`: the whole request, copy + download

# --- CLI -------------------------------------------------------------------
cli_http_timeout_secs = 30.0  # one CLI HTTP request, connect + response
cli_retry_wait_max_secs = 5.0  # longest Retry-After the CLI honours before its one retry
cluster_up_ready_timeout_secs = 30.0  # `cluster up`: wait this long for every node's /health
cluster_up_stop_grace_secs = 15.0  # `cluster up`: after SIGTERM, wait this long before SIGKILL
cluster_up_restart_backoff_first_secs = 0.5  # `cluster up`: wait before restarting a node that exited
cluster_up_restart_backoff_max_secs = 8.0  # `cluster up`: the restart wait doubles per exit up to this
cluster_up_restart_reset_secs = 30.0  # `cluster up`: a node up this long starts its backoff over
cluster_up_report_after_failures = 3  # `cluster up`: this many exits in a row print the node's log tail
cluster_up_report_every_failures = 8  # `cluster up`: ... and again every this many exits after that
cluster_up_give_up_failures = 3  # `cluster up`: ends when every node failed this many first starts
cluster_up_log_tail_lines = 12  # `cluster up`: lines of a failing node's output shown again
cluster_up_start_wait_secs = 30.0  # `cluster start NODE`: wait this long for its /health
cluster_control_request_max_bytes = 4096  # `cluster up` control socket: one request line
cluster_control_timeout_secs = 30.0  # `cluster stop|start|kill`: wait this long for the supervisor's answer
cluster_status_timeout_secs = 3.0  # `cluster status`: per-member status request

# --- MCP server (`ai-memory mcp`) -------------------------------------------
mcp_http_timeout_secs = 30.0  # one forwarded HTTP request to the node, connect + response
mcp_retry_wait_max_secs = 5.0  # longest Retry-After honoured before the one retry of a pop / create
bridge_poll_fast_secs = 5.0  # mcp-bridge --channel inbox: next notice poll after the text changed
bridge_poll_slow_secs = 60.0  # ... doubling up to this while it stays the same
hook_http_timeout_secs = 5.0  # a hook's requests to the node: a harness waits on it
hook_state_files_max = 256  # per-session notice state files kept by `ai-memory hook prompt`
notice_senders_max = 5  # senders a notice names for the agent's unread notifications (the count is exact)

# --- users, API keys and project grants (daemon/identity/) -----------------
user_name_max_chars = 64  # a user name: [A-Za-z0-9_.@-]
key_label_max_chars = 200  # an API key's free-text label
password_min_chars = 8  # a web inbox password
password_max_chars = 1024  # longer passwords are refused before they are hashed
api_key_max_chars = 128  # a presented key longer than this is unknown without a lookup
identity_lease_ms = 1500  # a node trusts its copy of the directory this long after a quorum read
identity_lease_margin_ms = 250  # a revocation waits the lease plus this before it is acknowledged
identity_confirm_retry_secs = (0.02, 0.05, 0.1)  # a revocation asks a member that lacks it again after these
identity_list_max = 10_000  # users, keys or grants one admin list returns

# --- web inbox (/web) --------------------------------------------------------
web_page_size = 50  # messages per page of a Received / Sent history
web_history_pages_max = 200  # deepest page offered (page * size rows skipped at most)
web_sessions_max = 1_000  # browser sessions one node keeps (the oldest go first)
web_session_idle_secs = 8 * 3600  # a session unused this long is forgotten
web_login_body_max_bytes = 4_096  # a login request's JSON body
web_held_max = 256  # held messages the banner lists per project (the mailbox cap)

# --- TLS (daemon/runtime/tls.py, common/certs.py) ------------------------------------
tls_ca_cert_days = 3650  # a cluster CA minted by `cluster init` / `tls rotate --new-ca`
tls_node_cert_days = 397  # a member certificate; `ai-memory tls rotate` mints the next one

# --- how limits relate (checked at import) ---------------------------------
# A waiting CLI hears a heartbeat before it gives up on a silent stream.
assert cli_wait_read_secs > stream_heartbeat_secs
# A forwarded mailbox request must outlive the owner's claim round.
assert forward_timeout_secs > claim_timeout_ms / 1000
# A read-quorum hedge fires before the quorum wait gives up.
assert read_hedge_ms < quorum_timeout_ms_default
assert read_hedge_ms <= read_hedge_max_ms <= quorum_timeout_ms_default / 4
# One batch never exceeds what a peer queue may hold; a push batch fits too.
assert replicate_batch_ops_max <= replicate_queue_ops_max
assert 1 <= peer_link_inflight_max <= peer_link_inflight_far_max
assert peer_link_inflight_http_max < peer_connections_per_host_max
assert sync_batch_ops_max <= replicate_queue_ops_max
# The writer folds at most a batch of what its queue holds; backpressure
# (half the queue) leaves room for the persists the core already counts on.
assert writer_batch_max <= writer_queue_max // 2
# Webhook intake batches fit in the intake queue, and the mailbox cap fits
# in what an owner may have waiting.
assert webhook_intake_batch_ops <= webhook_intake_ops_max
assert mailbox_pending_max <= mailbox_history_load_max
# A batch cut at the budget fits what its receiver accepts, with room for
# the op that crossed it (one that cannot be split, such as a folded
# Accept, is sent whole; the sender refuses it if it exceeds the limit).
assert peer_batch_bytes_max + 2 * request_body_max_bytes <= peer_body_max_bytes
# Ticks are much finer than any timeout they drive.
assert tick_secs * 1000 * 10 <= min(quorum_timeout_ms_default, claim_timeout_ms)
assert peer_down_after_secs * 1000 > read_hedge_ms
# A waiting member probes again well within systemd's start-timeout extension.
assert join_retry_max_secs + join_probe_timeout_secs < join_systemd_extend_secs
assert join_retry_first_secs <= join_retry_max_secs
# A late copy of a forwarded pop must meet its decision: the owner refuses
# copies older than the TTL (which allows for the clock skew peers tolerate),
# and the decision outlives that on every node, whose clocks may differ from
# the sender's and the decider's by that skew again.
assert mailbox_request_ttl_secs > auth_clock_skew_max_secs
assert pop_empty_keep_secs > mailbox_request_ttl_secs + 2 * auth_clock_skew_max_secs
# A revocation outwaits every member's lease, and the lease outlasts a read quorum.
assert identity_lease_margin_ms > 0 and identity_lease_ms >= read_hedge_ms
