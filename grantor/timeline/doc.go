// Package timeline serves a web page that shows who held which lease when:
// one lane per lease, a bar per tenure coloured by its holder, each end
// marked by its cause (released, revoked, expired, removed by gossip, or
// still live), the hold a revocation left after its tenure (no grant
// allowed; [history.Tenure.HeldUntil]), flapping leases highlighted. It reads a bucket's
// [history.Stream] and, with [WithLive], the leases live now (a lease
// granted before the window and live through it has no record in the
// window); `leased serve --http-listen` mounts it.
//
// # Endpoints
//
// All are read-only: GET and HEAD, other methods are refused with 405.
//
//	/                     the page (HTML, JS and CSS embedded in the binary)
//	/api/tenures          JSON: {"prefix", "since", "window_ms", "now", "limit", "truncated", "total", "after", "tenures": [history.Tenure…]}
//	/events               server-sent events: the history records, then each new one
//
// Each takes prefix (lease names beginning with it; "" for all) and since
// (a duration back from now such as 1h or 90m, or an RFC 3339 time; 1h by
// default). A bad parameter, or one the endpoint does not know, is answered
// 400 with a plain-text message.
//
// /api/tenures answers at most limit tenures ([DefaultLimit] unless the
// request gives limit, at most [MaxLimit]): if the window holds more,
// those read last, with "truncated": true and "total" the window's
// tenures as counted while read; a narrower prefix or a later since shows
// the others. The live leases under the prefix are read after the
// window's records, so they are kept first: all of them if they are at
// most limit, else the last limit by name and no tenure that has ended;
// then the ended tenures whose records came last (the most recently
// active). What a request keeps of the window's records is bounded by
// its limit, not by the window; the live leases' listing is not: it
// reads every live lease under the prefix.
// "after" is the id of the last record read (as /events gives ids); it is
// /events' parameter (/api/tenures refuses it), and /events ignores limit
// (the page passes its own on to both).
// It reads at most [DefaultMaxRecords] records ([WithMaxRecords]); a
// window holding more is answered 422, saying so. It serves at most
// [MaxReads] requests at once; more are answered 503 with Retry-After.
// /events' listing of the live leases takes one of the same slots,
// waiting for one.
//
// The page reads /api/tenures (passing on its own prefix, since and
// limit), draws what it gives, with a notice "N of M tenures shown" when
// truncated, then follows /events?after=<after> (a window /api/tenures
// answers 422, from its start: all its records); it keeps at most limit
// tenures, the least recently active that has ended let go as new ones
// come (a live lease stays, however long since its grant).
//
// /events sends first the grant record of each lease live now
// ([history.Live], with [WithLive]) as an event "record" without an id
// (sent again on each reconnect, folded into the same tenure), then each
// stored record as an event "record" whose data is the
// [history.Record] in JSON and whose id is its place in the stream
// ("<sequence>@<time stored>", [history.Position]); then one "caughtup"
// event ({"now", "since", "window_ms"}: the server's clock, the start of
// the window, and its length when since was a duration); then each new
// record as it is stored, and a "ping" with the server's clock every 15 s.
// A client that reads nothing for a minute, its connection's buffers full,
// is dropped (its slot freed).
// With after (an id, as /api/tenures' "after" gives it; or empty: from
// since), /events sends neither the live leases nor the records up to that
// one: only those stored after it (within the window), then "caughtup",
// and so on; a Last-Event-ID header takes its place.
// A browser reconnecting after a drop sends the last id it saw
// (Last-Event-ID) and gets every record appended after that one (within
// the window), whatever their times: a record appended late, or stamped
// by a clock ahead of the stream server's, is not missed. Another id is
// ignored (the window is sent again). The page folds repeats into the
// tenure they belong to, as [history.Fold] does.
//
// # Safety
//
// Lease names, holders and reasons are chosen by callers. The page puts
// them in the document only as text (textContent and attributes set from
// script, never parsed as HTML), the JSON escapes <, > and & and every
// response carries Content-Security-Policy "default-src 'self'" (no inline
// script, nothing loaded from elsewhere) and X-Content-Type-Options nosniff.
// The page has no authorization of its own: whoever reaches it sees every
// lease name, holder and reason in the stream. `leased serve` binds it to
// loopback unless told otherwise (--allow-public-http), and there answers
// only requests for localhost or an IP address (against DNS rebinding).
//
// # What it does not do
//
// It cannot change anything: there is no revoke or release from the
// browser. It keeps nothing: /api/tenures reads the stream (and lists the
// live leases) on every request, and each open page holds one ordered consumer on the stream
// (at most [MaxFollowers] at once; more are refused 503). The records it
// shows are the observer's (package grantor): renewals are counted only at
// a tenure's end, and a tenure that began and lapsed while no observer ran
// has no holder.
package timeline
