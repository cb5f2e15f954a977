package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of every span, span event and metric leased records. This
// is their one definition: kvlease, its recipes and the grantor all use these.
const (
	// AttrName is a lease's name. On spans always; on metrics only for the
	// leases [WithLeaseNamePrefixes] opts in.
	AttrName     = attribute.Key("lease.name")
	AttrHolder   = attribute.Key("lease.holder")
	AttrToken    = attribute.Key("lease.token")
	AttrRevision = attribute.Key("lease.revision")
	AttrDuration = attribute.Key("lease.duration_ms")
	AttrTTL      = attribute.Key("lease.ttl_s")
	// AttrOutcome is a low-cardinality outcome: "ok" or an error class
	// (held, not_holder, not_found, expired, unavailable, …) on kvlease's
	// spans and metrics, the wire's error code on the grantor's.
	AttrOutcome = attribute.Key("lease.outcome")
	// AttrCause says why a span is linked or a tenure ended (tenure,
	// released, revoked, expired).
	AttrCause = attribute.Key("lease.cause")
	// Set by the holder's spans (lease.holder.*), which know what the
	// grantor does not: the holder's margin m_h, and the time its lease had
	// left when the request went out and after the reply.
	AttrHolderMargin   = attribute.Key("lease.holder_margin_ms")
	AttrRemaining      = attribute.Key("lease.remaining_ms")
	AttrRemainingAfter = attribute.Key("lease.remaining_after_ms")
	// AttrAttempts is how many times the holder sent its grant request
	// (lease.holder.acquire); AttrRecovered marks a grant answered with the
	// tenure an earlier attempt of the same request made (a lost reply).
	AttrAttempts  = attribute.Key("lease.attempts")
	AttrRecovered = attribute.Key("lease.recovered")
	// AttrReason is why a tenure ended: a revocation's reason, or the
	// server's Nats-Marker-Reason.
	AttrReason = attribute.Key("lease.reason")
	// AttrFreeNow marks a revocation that freed the lease at once rather
	// than holding it until the revoked holder's deadline.
	AttrFreeNow = attribute.Key("lease.free_now")

	AttrFlapping = attribute.Key("lease.flapping")
	// AttrChangesInWindow is how many new tenures the flap detector
	// counted in its window.
	AttrChangesInWindow = attribute.Key("lease.changes_in_window")
	// AttrResource names a fenced resource in spans and logs; it is not a
	// metric label (one series per resource would grow without bound).
	AttrResource = attribute.Key("fence.resource")
	AttrPeer     = attribute.Key("clock.peer")
	// AttrOp is a grantor request's operation (grant, renew, release, get,
	// list, revoke, register, deregister, discover, or unknown).
	AttrOp = attribute.Key("lease.op")
	// AttrEvent is a change the grantor saw on the bucket: granted,
	// renewed, released, revoked, removed (by gossip) or expired (the
	// cause of a tenure's end, as the history has it).
	AttrEvent = attribute.Key("lease.event")
	// AttrWriteKind is how the store sent a write to the bucket: single
	// (one publish) or batch (one atomic batch, committed with one sync).
	AttrWriteKind = attribute.Key("write.kind")
	// AttrQueue is a work queue's name (kvlease/workqueue): a metric
	// label, as queues are few and named by their operators.
	AttrQueue = attribute.Key("workqueue.name")
)

// Metric names: the instruments [NewMetrics] creates. Prometheus exporters
// spell them with underscores and a unit or _total suffix
// (leased_renewal_duration_seconds, leased_fence_rejections_total).
const (
	MetricRenewalDuration    = "leased.renewal.duration"
	MetricRenewalFailures    = "leased.renewal.failures"
	MetricExpiriesDuringWork = "leased.expiries_during_work"
	MetricOwnershipChanges   = "leased.ownership.changes"
	MetricFenceRejections    = "leased.fence.rejections"
	MetricClockOffset        = "leased.clock.offset"
	MetricClockMargin        = "leased.clock.margin"
	MetricLeasesLive         = "leased.leases.live"
	MetricRequests           = "leased.requests"
	MetricRequestDuration    = "leased.request.duration"
	MetricLeaseEvents        = "leased.lease.events"
	MetricStoreWrites        = "leased.store.write.messages"
	MetricItemsGivenUp       = "leased.workqueue.items_given_up"
)
