package kvlease

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/telemetry"
)

// Headers on the messages kvlease writes. A watcher reads them from the
// bucket's stream to tell a release from a revocation (both are purges).
const (
	hdrOp     = "Leased-Op"     // grant | renew | release | revoke | expire (EndOverdue)
	hdrHolder = "Leased-Holder" // on release and revoke: the holder whose tenure ended
	hdrToken  = "Leased-Token"  // on release and revoke: that tenure's token
	hdrReason = "Leased-Reason" // on revoke: the operator's reason
	// hdrGranted: on release and revoke, the grant time of the tenure that
	// ended (RFC 3339), so that a watcher that never saw it live knows its
	// span.
	hdrGranted = "Leased-Granted"
	// hdrRequest: on the end of a tenure whose grant had a request ID, a
	// hash of the name, that request ID and the secret's hash
	// (requestKey), so that a retry of that grant that finds the end is
	// told ErrRequestUsed, not granted again, however long after (the
	// stream's duplicate window is two minutes, and a restarted server
	// rebuilds it only from the messages still stored, which a release
	// rolls up).
	hdrRequest = "Leased-Request"
	// hdrDuration and hdrTrace: on the end of a tenure, its duration (ms)
	// and its grant's traceparent, so that a watcher whose delivery the
	// release overtook (it rolls up the grant) reports the grant it missed
	// in full (Store.classify).
	hdrDuration = "Leased-Duration-Ms"
	hdrTrace    = "Leased-Grant-Trace"
	// hdrExpired: on the end EndOverdue writes, when the record it ended
	// had expired (RFC 3339): the end is reported then, not when a grantor
	// found the record kept past it (after an unclean restart the server
	// brought back records of leases released long before, and their
	// history showed them held until the restart: found by an outside
	// client).
	hdrExpired = "Leased-Expired-At"

	// hdrPrev prefixes, on a grant that replaced a tombstone, that
	// tombstone's headers (tombstoneHeaders), with its revision and store
	// time: a watcher that lagged past the tombstone learns from the grant
	// how the tenure before ended (see tombstone).
	hdrPrev         = "Leased-Prev-"
	hdrPrevRevision = hdrPrev + "Revision"
	hdrPrevTime     = hdrPrev + "Time"

	// hdrSecretHash, on an end: the hash of the tenure's secret.
	hdrSecretHash = "Leased-Secret-Hash"

	// hdrHold, on a revocation: how long (ms) from when it was stored the
	// lease stays held, no grant allowed, so that the revoked holder's
	// deadline passes first (see Store.Revoke).
	hdrHold = "Leased-Hold-Ms"

	hdrKVOp     = "KV-Operation"
	kvOpPurge   = "PURGE"
	kvOpDel     = "DEL"
	rollupSubj  = "sub"
	markerMaxAg = "MaxAge"
)

// tombstoneHeaders are the headers of a tombstone or marker that say how a
// tenure ended (see endEvent).
var tombstoneHeaders = [...]string{hdrOp, hdrHolder, hdrToken, hdrReason, hdrGranted, hdrKVOp, jetstream.MarkerReasonHeader, hdrRequest,
	hdrDuration, hdrTrace, hdrHold, hdrExpired}

// tombstone is the message that ended a tenure, as a Store wrote or read
// it: what the grant that replaces it carries, so that watchers that never
// receive it (the grant removes it from the stream) still learn of the
// end. Kept in the revision cache, so compact: the values of
// tombstoneHeaders, in order.
type tombstone struct {
	rev  uint64
	at   time.Time // stored then (the server's clock if read, the Store's if written)
	vals [len(tombstoneHeaders)]string
	// secretHash is the ended tenure's (hdrSecretHash), kept to check a
	// claim against; a grant does not carry it (see addTo).
	secretHash string
	// overdue: not stored, but the end of a record a read found the
	// server had kept past its TTL (overdueTombstone): at rev is that
	// record, not an end.
	overdue bool
}

// tombstoneOf is the tombstone stored at rev and at with headers h.
func tombstoneOf(rev uint64, at time.Time, h nats.Header) *tombstone {
	t := readTombstone(rev, at, h, "")
	t.secretHash = h.Get(hdrSecretHash)
	return t
}

// readTombstone is the tombstone at rev and at whose headers h holds,
// each name prefixed with prefix.
func readTombstone(rev uint64, at time.Time, h nats.Header, prefix string) *tombstone {
	t := &tombstone{rev: rev, at: at}
	for i, k := range tombstoneHeaders {
		t.vals[i] = h.Get(prefix + k)
	}
	return t
}

// writeTo sets t's headers in h, each name prefixed with prefix.
func (t *tombstone) writeTo(h nats.Header, prefix string) {
	for i, k := range tombstoneHeaders {
		if t.vals[i] != "" {
			h.Set(prefix+k, t.vals[i])
		}
	}
}

// header is t's headers.
func (t *tombstone) header() nats.Header {
	h := nats.Header{}
	t.writeTo(h, "")
	return h
}

// endedRequest reports whether t ended the tenure a grant with request
// key key made (see hdrRequest).
func (t *tombstone) endedRequest(key string) bool {
	return t != nil && key != "" && t.get(hdrRequest) == key
}

// get is the value of t's header name, one of tombstoneHeaders.
func (t *tombstone) get(name string) string {
	return t.vals[slices.Index(tombstoneHeaders[:], name)]
}

// addTo writes t to the headers of the grant that replaces it.
func (t *tombstone) addTo(h nats.Header) {
	t.writeTo(h, hdrPrev)
	h.Set(hdrPrevRevision, strconv.FormatUint(t.rev, 10))
	h.Set(hdrPrevTime, t.at.UTC().Format(time.RFC3339Nano))
}

// replacedTombstone reads the tombstone a grant's headers h carry.
func replacedTombstone(h nats.Header) (*tombstone, bool) {
	rev := parseUint(h.Get(hdrPrevRevision))
	if rev == 0 {
		return nil, false // most grants: a free name, or a tombstone the store did not know
	}
	at, err := time.Parse(time.RFC3339Nano, h.Get(hdrPrevTime))
	if err != nil {
		return nil, false
	}
	return readTombstone(rev, at, h, hdrPrev), true
}

// Store is the grantor side of leases on one JetStream KV bucket: grant,
// renew, release, revoke, get, list and watch. It is safe for concurrent use.
//
// Every write is a JetStream publish with an expected-last-revision check,
// so the bucket alone decides conflicts: several Stores (in several
// processes) may serve the same bucket. Concurrent writes are committed
// together as atomic batches unless [WithoutBatching] (see the package
// documentation, "Group commit"); a lone write is one publish.
type Store struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	stream jetstream.Stream
	o      options
	tracer trace.Tracer
	// metrics records the store's writes (messages per write, by kind).
	metrics *telemetry.Metrics
	log     *slog.Logger
	prefix  string // "$KV.<bucket>."

	msgGetSubject string // the stream's STREAM.MSG.GET API subject
	directGetSubj string // the stream's DIRECT.GET subject
	cache         revCache
	w             *writer // the group commit; nil without batching
	revoking      revocations
	// staleLog limits "stale read of a lease": any caller may name a
	// revision above the lease's, which reads as stale every time.
	staleLog telemetry.LogLimit
	// lastFull and lastAccepted are when a write's answer last said the
	// server's storage limit refused it, and that it was accepted: on
	// the monotonic clock (monoSince; a step of the wall clock moves
	// neither), 0 for none (StorageFull). Each keeps the latest answer,
	// whatever order the writers note them in.
	lastFull, lastAccepted atomic.Int64
	// wroteHook (tests) is called once a write's answer has reached its
	// writer, before it is noted.
	wroteHook func(err error)
}

var _ Grantor = (*Store)(nil)

// Open opens the lease bucket, creating it if it is missing (history 1,
// per-key TTLs enabled, atomic batches allowed, file storage, the
// configured replicas). An existing bucket must support per-key TTLs and
// keep one revision per key, or Open fails with [ErrBucket]; one that does
// not allow atomic batches is updated to allow them (its entries and
// revisions stay), and if the server refuses that, Open fails with
// [ErrBucket] saying so (with [ErrPermission] too for a NATS user that may
// not update the bucket's stream), unless [WithoutBatching]. A bucket Open
// creates is made as it is to be, needing no update: a user that may
// create streams but not update them can create it. Open never deletes or
// recreates a bucket, since that would reset the revisions that serve as
// fencing tokens.
//
// While JetStream is unavailable (a cluster still electing its leaders does
// not answer at all; a bucket being created answers "not found" for a
// moment), Open retries with backoff, each attempt bounded by a few seconds,
// and returns [ErrUnavailable] only once ctx ends. A bucket refused for too
// few servers to place its replicas on is asked for again for 15 s (a
// cluster still forming may not know all its servers yet), then that
// refusal is returned ([ErrBucket]). Refusals (a bucket that
// is missing under [WithoutCreate], or unfit for leases) return at once,
// as does [ErrInvalidOption] for an option that refuses its value, and
// [ErrPermission] (the NATS server's permissions refused a request Open
// needs, naming its subject: the server answers such a request with
// nothing, and Open returns after one round trip for a stream update, and
// after one attempt, a few seconds, for the others, not when ctx ends).
func Open(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Store, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidOption)
	}
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	nc := js.Conn()
	before := lastError(nc)
	// The first refusal for too few servers: the patience counts from
	// it, not from Open's start (a forming cluster silent for longer than
	// the patience was given none).
	var refused time.Time
	return RetryUnavailable(ctx, 2*time.Second, func(err error) {
		o.logger.Info("waiting for JetStream", "bucket", o.bucket, "err", err)
	}, func() (*Store, error) {
		actx, cancel := context.WithTimeout(ctx, openAttemptTimeout)
		defer cancel()
		st, err := open(actx, js, o)
		refusal, tooFew := tooFewPeers(err)
		if tooFew && refused.IsZero() {
			refused = time.Now()
		}
		if tooFew && time.Since(refused) < noPeersPatience {
			// A cluster still forming: its meta leader can place a stream
			// before it has heard of every server, and refuses it for too
			// few of them (seen under load: a 3-node cluster's R3 bucket,
			// in a CI-like run of TestOpenWhileClusterForms). A cluster of
			// fewer servers than the replicas refuses it for good: said so
			// once the patience is spent.
			return nil, fmt.Errorf("%w: open bucket %q: too few JetStream servers for %d replicas yet (a cluster still forming?): %w",
				ErrUnavailable, o.bucket, o.replicas, refusal)
		}
		if errors.Is(err, ErrUnavailable) {
			// An attempt that went unanswered because the server refused
			// one of its requests (a user that may not create the bucket,
			// or read its stream): the refusal reached the connection long
			// before the attempt gave up, and waiting does not change it.
			// Open waited until ctx ended (found by an outside client).
			if refused := refusedOpen(nc, before, apiPrefix(js), o.bucket); refused != nil {
				return nil, fmt.Errorf("%w: open bucket %q: the NATS server refused a request of this user (and answers such a request with nothing): %w",
					ErrPermission, o.bucket, refused)
			}
		}
		return st, err
	})
}

func lastError(nc *nats.Conn) error {
	if nc == nil {
		return nil
	}
	return nc.LastError()
}

// refusedOpen returns nc's last error if it is a permissions violation
// reported since before (a new error value) for a request Open makes: a
// publish to the JetStream API (prefix) naming bucket's stream, or a
// subscription to the connection's inboxes, where the replies come.
func refusedOpen(nc *nats.Conn, before error, prefix, bucket string) error {
	err := lastError(nc)
	if err == nil || err == before || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	subject, stream := m[2], StreamName(bucket)
	inbox := cmp.Or(nc.Opts.InboxPrefix, nats.InboxPrefix)
	switch {
	case strings.EqualFold(m[1], "publish") && strings.HasPrefix(subject, prefix) &&
		(strings.HasSuffix(subject, "."+stream) || strings.Contains(subject, "."+stream+".")):
		return err
	case strings.EqualFold(m[1], "subscription") && strings.HasPrefix(subject, strings.TrimSuffix(inbox, ".")+"."):
		return err
	}
	return nil
}

// violationRe finds the refused operation and subject in nats.go's
// permissions violation.
var violationRe = regexp.MustCompile(`(?i)violation for (publish|subscription) to "([^"]*)"`)

// openAttemptTimeout bounds one attempt of Open: a JetStream API request
// that no server answers (no metadata leader yet) would otherwise use all of
// the caller's deadline.
const openAttemptTimeout = 2 * time.Second

func open(ctx context.Context, js jetstream.JetStream, o options) (*Store, error) {
	if nc := js.Conn(); nc != nil && !nc.IsConnected() {
		// Requests would wait in nats.go's reconnect buffer, and then
		// fail with "outbound buffer limit exceeded" (found by an outside
		// client): say what it is.
		return nil, NotConnected(nc, "open the lease bucket")
	}
	kv, err := js.KeyValue(ctx, o.bucket)
	created := false
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound) && o.create:
		create := o
		if o.newFirst != nil {
			first, ferr := o.newFirst(ctx)
			switch {
			case ferr != nil:
				return nil, ferr
			case first > MaxFirstToken:
				return nil, fmt.Errorf("%w: new bucket's first token %d above %d (MaxFirstToken)", ErrInvalidOption, first, MaxFirstToken)
			}
			create.firstToken = max(create.firstToken, first)
		}
		kv, err = createBucket(ctx, js, create)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // lost a race with another Open
			kv, err = js.KeyValue(ctx, o.bucket)
		}
		if err != nil {
			return nil, translate("create bucket", err)
		}
		created = true
		o.logger.Info("created lease bucket", "bucket", o.bucket, "replicas", o.replicas)
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, fmt.Errorf("%w: bucket %q does not exist", ErrBucket, o.bucket)
	case errors.Is(err, nats.ErrNoResponders):
		// Nothing subscribes to the JetStream API for this account: serve
		// --nats-url against a nats-server without JetStream waited its
		// minute and exited saying only nats.go's "no responders available
		// for request" (found following README's cluster set-ups; s13d).
		// Still unavailable: a server of a cluster that lacks JetStream
		// reaches the others' once its routes are up.
		return nil, fmt.Errorf("%w: open bucket: no JetStream server answered for this account (enable JetStream on the NATS servers, "+
			"and for the account of this user): %w", ErrUnavailable, err)
	case err != nil:
		return nil, translate("open bucket", err)
	}
	st, stream, err := describeBucket(ctx, js, kv, o.bucket)
	if err != nil {
		return nil, err
	}
	if err := checkBucket(st); err != nil {
		return nil, err
	}
	if err := checkFirstToken(stream, o); err != nil {
		return nil, err
	}
	if stream, err = bucketPolicy(ctx, js, stream, &o); err != nil {
		return nil, err
	}
	if have := stream.CachedInfo().Config.Replicas; have != o.replicas {
		o.logger.Warn("lease bucket replicas differ from configuration",
			"bucket", o.bucket, "have", have, "configured", o.replicas)
	}
	if !o.batchSet {
		o.batch = DefaultBatchLimits(stream.CachedInfo().Config.Replicas)
	}
	if !stream.CachedInfo().Config.AllowAtomicPublish && (created || o.batch.Enabled) {
		if stream, err = allowAtomicPublish(ctx, js, stream, o); err != nil {
			if o.batch.Enabled {
				return nil, err
			}
			o.logger.Warn("could not allow atomic batches on the new lease bucket", "bucket", o.bucket, "err", err)
		}
	}
	metrics, err := telemetry.NewMetrics(o.mp) // nil: the global provider
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrInvalidOption, err)
	}
	store := &Store{
		metrics:       metrics,
		js:            js,
		nc:            js.Conn(),
		msgGetSubject: apiPrefix(js) + "STREAM.MSG.GET." + stream.CachedInfo().Config.Name,
		directGetSubj: apiPrefix(js) + "DIRECT.GET." + stream.CachedInfo().Config.Name,
		stream:        stream,
		o:             o,
		tracer:        o.tracerProvider().Tracer(instrumentationName),
		log:           o.logger,
		prefix:        "$KV." + o.bucket + ".",
		cache:         revCache{m: make(map[string]cacheEntry), keep: max(o.markerTTL, stream.CachedInfo().Config.SubjectDeleteMarkerTTL)},
	}
	if o.batch.Enabled {
		store.w = newWriter(store, o.batch)
	}
	return store, nil
}

// bucketConfig is the lease bucket as Open creates it.
func bucketConfig(o options) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         o.bucket,
		Description:    "leased: leases (revision = fencing token)",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       o.replicas,
		LimitMarkerTTL: o.markerTTL,
	}
}

// createBucket creates the lease bucket. It creates the bucket's stream
// itself, as nats.go's CreateKeyValue would (kvStreamConfig), but allowing
// atomic batches, with the bucket's policy if it is to record one
// ([WithBucketPolicy]), and with its first_seq set for a first token
// ([WithFirstToken]), which KeyValueConfig has no fields for. Made so,
// the bucket needs no update: a NATS user that may create streams but
// not update them got no answer to the update, and Open waited until its
// ctx ended (found by an outside client; TestOpenWithoutStreamUpdatePermission).
func createBucket(ctx context.Context, js jetstream.JetStream, o options) (jetstream.KeyValue, error) {
	cfg := kvStreamConfig(bucketConfig(o))
	cfg.AllowAtomicPublish = true
	if o.setPolicy {
		cfg.Metadata = policyMetadata(o)
	}
	if o.firstToken > 1 {
		cfg.FirstSeq = uint64(o.firstToken)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, o.bucket)
}

// kvStreamConfig is the stream nats.go's CreateKeyValue makes for c, for
// what the lease bucket sets (TestFirstTokenBucketIsNATSKV keeps the two
// alike).
func kvStreamConfig(c jetstream.KeyValueConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                   StreamName(c.Bucket),
		Description:            c.Description,
		Subjects:               []string{"$KV." + c.Bucket + ".>"},
		MaxMsgsPerSubject:      int64(c.History),
		MaxBytes:               -1,
		MaxMsgSize:             -1,
		Storage:                c.Storage,
		Replicas:               c.Replicas,
		AllowRollup:            true,
		DenyDelete:             true,
		Duplicates:             2 * time.Minute,
		MaxMsgs:                -1,
		MaxConsumers:           -1,
		AllowDirect:            true,
		Discard:                jetstream.DiscardNew,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: c.LimitMarkerTTL,
	}
}

// checkFirstToken fails if the bucket's revisions are below the first
// token asked for ([WithFirstToken]): its tokens would be below those the
// fences saw.
func checkFirstToken(stream jetstream.Stream, o options) error {
	if o.firstToken <= 1 {
		return nil
	}
	info := stream.CachedInfo()
	if next := info.State.LastSeq + 1; next < uint64(o.firstToken) {
		return fmt.Errorf("%w: bucket %q exists, and its next revision (fencing token) is %d, below the first token %d asked for; "+
			"the revisions of a bucket cannot be raised in place (they are its stream's sequence numbers): a bucket that is to begin "+
			"above a token must be created with it; this one serves with a first token of at most %d, or none",
			ErrBucket, o.bucket, next, o.firstToken, next)
	}
	return nil
}

// allowAtomicPublish updates the bucket's stream to accept atomic batches
// (KeyValueConfig has no field for it), which works on an existing bucket
// too and changes nothing else: revisions, entries and TTLs stay. A
// refusal, or a server that keeps the stream as it was (older than 2.12),
// is [ErrBucket] saying so, and a NATS user that may not update the
// stream is [ErrBucket] and [ErrPermission]; the bucket is never recreated.
func allowAtomicPublish(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, o options) (jetstream.Stream, error) {
	cfg := stream.CachedInfo().Config
	cfg.AllowAtomicPublish = true
	updated, err := UpdateStream(ctx, js, cfg)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, ErrPermission):
		return nil, fmt.Errorf("%w: bucket %q does not allow atomic batch publishes, and this user may not allow them: %w; "+
			"allow them on stream %s as a user that may update it (Open does, as the leased user of docs/api.md), "+
			"or open the store with WithoutBatching", ErrBucket, o.bucket, err, cfg.Name)
	case errors.As(err, &apiErr) && apiErr.Code < 500:
		return nil, fmt.Errorf("%w: bucket %q does not allow atomic batch publishes, and the server refused to allow them: %w; "+
			"allow them on stream %s (nats-server 2.12 or newer), or open the store with WithoutBatching",
			ErrBucket, o.bucket, err, cfg.Name)
	case err != nil:
		return nil, translate("allow atomic publish", err)
	case !updated.CachedInfo().Config.AllowAtomicPublish:
		return nil, fmt.Errorf("%w: bucket %q: the server does not keep allow_atomic on stream %s (nats-server older than 2.12?); "+
			"open the store with WithoutBatching", ErrBucket, o.bucket, cfg.Name)
	}
	o.logger.Info("allowed atomic batch publishes on the lease bucket", "bucket", o.bucket)
	return updated, nil
}

// The bucket's policy: its stream's metadata keys (see WithBucketPolicy).
const (
	policyMargin = "leased.grantor_margin"
	policyMinD   = "leased.min_duration"
	policyMaxD   = "leased.max_duration"
)

// policyMetadata is o's margin and range as the bucket's metadata records them.
func policyMetadata(o options) map[string]string {
	return map[string]string{policyMargin: o.grantorMargin.String(), policyMinD: o.minDuration.String(), policyMaxD: o.maxDuration.String()}
}

// bucketPolicy records o's margin and range on the bucket (setPolicy), or
// takes from the bucket's policy what o was not given.
func bucketPolicy(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, o *options) (jetstream.Stream, error) {
	cfg := stream.CachedInfo().Config
	have := cfg.Metadata
	if !o.setPolicy {
		d := func(key string) (time.Duration, bool) {
			v, err := time.ParseDuration(have[key])
			return v, err == nil
		}
		if m, ok := d(policyMargin); ok && !o.marginSet && m >= 0 && serverTTLFits(o.maxDuration, m) {
			o.grantorMargin = m
		}
		minD, okMin := d(policyMinD)
		maxD, okMax := d(policyMaxD)
		if okMin && okMax && !o.rangeSet && minD >= MinDuration && maxD >= minD && serverTTLFits(maxD, o.grantorMargin) {
			o.minDuration, o.maxDuration = minD, maxD
		}
		return stream, nil
	}
	want := policyMetadata(*o)
	same := true
	for k, v := range want {
		same = same && have[k] == v
	}
	if same {
		return stream, nil
	}
	cfg.Metadata = maps.Clone(have)
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	maps.Copy(cfg.Metadata, want)
	updated, err := UpdateStream(ctx, js, cfg)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, ErrPermission) || errors.As(err, &apiErr) && apiErr.Code < 500:
		o.logger.Warn("could not record the grantor policy on the lease bucket: Stores that open it directly use their own",
			"bucket", o.bucket, "err", err)
		return stream, nil
	case err != nil:
		return nil, translate("record bucket policy", err)
	}
	log := o.logger.Info
	if have[policyMargin] != "" {
		log = o.logger.Warn // another grantor recorded another policy: grantors of a bucket should agree
	}
	log("recorded the grantor policy on the lease bucket", "bucket", o.bucket, "grantor_margin", want[policyMargin],
		"min_duration", want[policyMinD], "max_duration", want[policyMaxD],
		"replaced", strings.TrimSpace(have[policyMargin]+" "+have[policyMinD]+" "+have[policyMaxD]))
	return updated, nil
}

// describeBucket reads the status and stream of a bucket that was just
// found or created. In a cluster a stream that is being created can answer
// "stream not found" for a moment even after another request found it: the
// server that is to lead its new group may be asked before it has made the
// stream (nats-server jsStreamInfoRequest: "could happen if same stream
// trying to be created"), or a new metadata leader may not have applied the
// assignment yet. That is [ErrUnavailable], which Open waits out, never a
// refusal: the bucket is not wrong, only not ready.
func describeBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket string) (jetstream.KeyValueStatus, jetstream.Stream, error) {
	st, err := kv.Status(ctx)
	if err == nil {
		var stream jetstream.Stream
		if stream, err = js.Stream(ctx, StreamName(bucket)); err == nil {
			return st, stream, nil
		}
	}
	if streamNotFound(err) {
		return nil, nil, fmt.Errorf("%w: bucket %q found but its stream is not ready: %w", ErrUnavailable, bucket, err)
	}
	return nil, nil, translate("bucket status", err)
}

func streamNotFound(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamNotFound
}

func checkBucket(st jetstream.KeyValueStatus) error {
	switch {
	case st.LimitMarkerTTL() <= 0:
		return fmt.Errorf("%w: bucket %q was created without per-key TTLs (LimitMarkerTTL); "+
			"create a new bucket for leases, do not recreate this one (its revisions are fencing tokens)",
			ErrBucket, st.Bucket())
	case st.History() != 1:
		return fmt.Errorf("%w: bucket %q keeps %d revisions per key; leases need history 1", ErrBucket, st.Bucket(), st.History())
	}
	return nil
}

// TracerProvider returns where the Store's spans go. A [Lease] acquired on
// the Store sends its holder spans there too.
func (s *Store) TracerProvider() trace.TracerProvider { return s.o.tracerProvider() }

// Logger returns the Store's logger ([WithLogger]). The recipes built on a
// Store (kvlease/workqueue) log there too.
func (s *Store) Logger() *slog.Logger { return s.log }

// Metrics returns the instruments the Store records on (on the provider
// of [WithStoreMeterProvider]). The recipes built on a Store count there
// too: kvlease/workqueue its items given up.
func (s *Store) Metrics() *telemetry.Metrics { return s.metrics }

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.o.bucket }

// StreamName is the name of bucket's JetStream stream: JetStream KV keeps
// bucket B in the stream KV_B.
func StreamName(bucket string) string { return "KV_" + bucket }

// Replicas returns the bucket stream's replica count, as Open found it.
func (s *Store) Replicas() int { return s.stream.CachedInfo().Config.Replicas }

// Batching reports whether the store commits concurrent writes together
// as atomic batches (group commit; off with [WithoutBatching]). Streams
// kept beside the bucket follow it: where batches do not pay for the
// bucket (a server that acknowledges before it syncs), they do not for
// its neighbours either.
func (s *Store) Batching() bool { return s.w != nil }

// JetStream returns the JetStream context the Store was opened on, for
// streams kept beside the bucket (the grantor's history).
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// LastRevision returns the bucket's revision now: the sequence of its
// stream's last message, read through the stream leader (0 if empty).
func (s *Store) LastRevision(ctx context.Context) (uint64, error) {
	m, err := s.leaderGet(ctx, msgGetRequest{LastFor: s.prefix + ">"})
	switch {
	case errors.Is(err, errNoMessage):
		return 0, nil
	case err != nil:
		return 0, translate("last revision", err)
	}
	return m.Sequence, nil
}

// GrantorMargin returns m_g ([WithGrantorMargin]).
func (s *Store) GrantorMargin() time.Duration { return s.o.grantorMargin }

// DurationRange returns the shortest and longest durations Grant and Renew
// accept ([WithDurationRange]). A service on the Store reads them here, so
// that there is one place they are set.
func (s *Store) DurationRange() (minD, maxD time.Duration) { return s.o.minDuration, s.o.maxDuration }

// CheckOptions returns the error [Open] would return for opts before it
// talks to the server: a bad value or a bad combination ([ErrInvalidOption]).
// A command can check its flags with it before it starts anything.
func CheckOptions(opts ...Option) error {
	_, err := applyOptions(opts)
	return err
}

// applyOptions is the options [Open] and [CheckOptions] see: each option
// checks its own value.
func applyOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return options{}, fmt.Errorf("%w: nil store option", ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	if !serverTTLFits(o.maxDuration, o.grantorMargin) {
		return options{}, fmt.Errorf("%w: maximum duration %v plus the grantor margin %v is past the longest server TTL (%v)",
			ErrInvalidOption, o.maxDuration, o.grantorMargin, maxServerTTL)
	}
	return o, nil
}

// maxServerTTL is the longest server TTL (ServerTTL: D plus the grantor
// margin, rounded up to whole seconds) a Store writes. nats-server takes a
// message's expiry as its time in Unix nanoseconds plus the TTL, an int64
// that wraps past 2262-04-11: a lease whose expiry lay beyond was lapsed at
// once (serve --max-ttl 2562047h granted a lease said to last until 2319,
// which the server removed within a second and granted to another holder;
// found by an outside client). A century keeps clear of it until 2162.
const maxServerTTL = 100 * 365 * 24 * time.Hour

// serverTTLFits reports whether a lease of maxD granted with margin has a
// server TTL of at most maxServerTTL. One past time.Duration's range
// wrapped negative, too, and such a grant was stored without a TTL: a
// lease that never lapsed (serve --max-ttl 2562047h47m16s).
func serverTTLFits(maxD, margin time.Duration) bool {
	return maxD >= 0 && margin >= 0 && margin <= maxServerTTL && maxD <= maxServerTTL-margin-time.Second
}

// GrantRequest asks for a new tenure.
type GrantRequest struct {
	Name       string
	Holder     string
	Duration   time.Duration
	Attributes map[string]string
	// Secret, if set, must accompany every renewal and release of this
	// tenure; only its hash is stored. The service API sets a random one
	// unless the caller chose one.
	Secret string
	// RequestID, if set, names this request so that it can be sent again
	// when its reply is lost (a node killed or cut off after it wrote, a
	// request that waited in a paused node): a retry with the same
	// RequestID and Secret returns the tenure an earlier attempt made, with
	// its token, marked [Record].Recovered, where it would otherwise be
	// refused [HeldError] by its own tenure. It needs a Secret, which proves
	// the retry is the same caller: anyone else presenting the RequestID is
	// answered as without it. One ID per request ([NewRequestID]): a retry
	// that asks for something else is [ErrRequestMismatch], and one whose
	// tenure has ended is [ErrRequestUsed], never a second grant: told so
	// while the release or revocation that ended it lasts (it names the
	// request), or, after a lapse, within the stream's duplicate window
	// (not over a server restart). Retry only before the deadline counted
	// from the first attempt, when no lapse can have happened.
	RequestID string
}

// RenewRequest extends a tenure. Token and Revision come from the holder's
// last grant or renewal.
type RenewRequest struct {
	Name     string
	Holder   string
	Token    Token
	Revision uint64
	Duration time.Duration
	Secret   string // the grant's secret, if it had one
	// SecretRequired refuses (ErrNotHolder) a tenure granted without a
	// secret: a service whose callers cannot be trusted to name only their
	// own tenures sets it.
	SecretRequired bool
}

// ReleaseRequest ends a tenure early.
type ReleaseRequest struct {
	Name     string
	Holder   string
	Token    Token
	Revision uint64
	Secret   string // the grant's secret, if it had one
	// SecretRequired: as in RenewRequest.
	SecretRequired bool
}

// Grantor is what a holder needs from a grantor. *Store implements it on the
// bucket directly; [github.com/leased/leased/grantor/client.Client]
// implements it over the service API.
//
// Every method must return soon after its ctx ends (as both do, but for
// one case in nats.go: while it reconnects, an attempt holds the
// connection's lock for up to its connect timeout, nats.Timeout, 2 s by
// default, and a request sent meanwhile waits for it past ctx): a
// [Keeper] waits for the renewal in flight before it stops, so one that
// ignores ctx keeps [Keeper.Close], [Keeper.Orphan] and [Keeper.Done]
// waiting for it. The holder's deadline does not wait: [Keeper.Context]
// ends on time all the same.
type Grantor interface {
	Grant(ctx context.Context, req GrantRequest) (Record, error)
	Renew(ctx context.Context, req RenewRequest) (Record, error)
	Release(ctx context.Context, req ReleaseRequest) error
}

// CheckDuration refuses (ErrDurationOutOfRange) a duration outside
// [Store.DurationRange]: what Grant and Renew would refuse.
func (s *Store) CheckDuration(d time.Duration) error {
	if d < s.o.minDuration || d > s.o.maxDuration {
		return fmt.Errorf("%w: %v not in [%v, %v]", ErrDurationOutOfRange, d, s.o.minDuration, s.o.maxDuration)
	}
	return nil
}

// Grant creates a tenure if the lease is free: no key, or its last entry is a
// release, revocation or expiry marker. The key is stored with TTL
// [ServerTTL](Duration, grantor margin); the returned record's Token is the
// new revision, higher than every revision before it in the bucket.
//
// A request with a RequestID is idempotent: its publishes carry a message
// ID derived from the name, RequestID and Secret, so that the stream drops
// a second write of it within its duplicate window (two minutes for a KV
// bucket); a retry that finds the lease held by the tenure its RequestID
// and Secret made returns that tenure, and one that finds that tenure's
// release or revocation is [ErrRequestUsed] (see [GrantRequest]).
//
// Errors: [ErrInvalidName], [ErrInvalidHolder], [ErrDurationOutOfRange],
// [ErrInvalidRequestID] (nothing written); [HeldError] if someone holds
// it; [ErrRequestMismatch], [ErrRequestUsed] for a retried request;
// [ErrUnavailable].
func (s *Store) Grant(ctx context.Context, req GrantRequest) (rec Record, err error) {
	ctx, span := s.startSpan(ctx, "grant", req.Name, telemetry.AttrHolder.String(req.Holder),
		telemetry.AttrDuration.Int64(req.Duration.Milliseconds()))
	defer func() {
		if rec.Recovered {
			span.SetAttributes(telemetry.AttrRecovered.Bool(true))
		}
		endSpan(span, &rec, err)
	}()
	if err := errors.Join(cmp.Or(ValidateName(req.Name), checkReserved(ctx, req.Name)), ValidateHolder(req.Holder),
		s.CheckDuration(req.Duration), checkRequestID(req)); err != nil {
		return Record{}, err
	}
	ttl := ServerTTL(req.Duration, s.o.grantorMargin)
	req.Attributes = maps.Clone(req.Attributes)
	sh := hashSecret(req.Secret)
	tp := traceparent(ctx)
	data := value{Holder: req.Holder, DurationMS: req.Duration.Milliseconds(), Attributes: req.Attributes, SecretHash: sh,
		Trace: tp, RequestID: req.RequestID}.encode()
	expect, ended := s.cache.lastGone(req.Name)
	// Each retry follows a newer revision; three cover a lease that lapses
	// or is released while we look. A refusal of the revision the read then
	// shows is not a change: it is tried again after a wait (see
	// compareAndSet), up to len(refusedCurrentBackoff) times.
	var rkey string
	if req.RequestID != "" {
		rkey = requestKey(req.Name, req.RequestID, sh)
	}
	confirmed := false // a hold the cache showed was read again
	for changed, waited, reads := 0, 0, 0; changed < 3; {
		if ended.endedRequest(rkey) && ended.rev == expect {
			return Record{}, fmt.Errorf("%w: request %q granted %q with token %s, and that tenure has ended",
				ErrRequestUsed, req.RequestID, req.Name, ended.get(hdrToken))
		}
		held, known := s.heldBy(ctx, req.Name, expect, ended)
		if held != nil && confirmed {
			return Record{}, held
		}
		if held != nil || !known {
			// This store's cache may be behind: another node may have
			// freed it since. Or it has forgotten the end at expect,
			// whose hold a grant must not pass (found in review: the hold
			// was checked on a second look at the cache, which could
			// have dropped it). Ask the stream leader.
			if reads++; reads > 3 {
				return Record{}, fmt.Errorf("%w: lease %q: the end at revision %d could not be kept in view", ErrUnavailable, req.Name, expect)
			}
			cur, live, err := s.lastAtLeast(ctx, req.Name, expect, 0)
			switch {
			case err != nil:
				return Record{}, err
			case live:
				return s.heldAnswer(req, cur)
			}
			confirmed, expect = true, cur.Revision
			_, ended = s.cache.lastGone(req.Name)
			continue
		}
		if ended != nil && ended.rev == expect && ended.overdue {
			// At expect is a record the server kept past its TTL, taken as
			// lapsed: live on the server, not an end. Its expiry marker
			// may yet come (a stream's new leader expires what it kept as
			// it gets to it), and the marker rolls up the subject, with it
			// a grant written over the record, acknowledged: the long
			// cluster fault run saw one lost so, and another holder
			// granted the lease 40 ms later. So the record is ended first,
			// on its own: once that end is acknowledged, the stream leader
			// has dropped the record, and no marker for it follows; one
			// already on its way is ordered before the grant.
			if _, err := s.EndOverdue(ctx, req.Name); err != nil {
				return Record{}, err
			}
			cur, live, err := s.lastAtLeast(ctx, req.Name, expect, 0)
			switch {
			case err != nil:
				return Record{}, err
			case live:
				return s.heldAnswer(req, cur)
			}
			changed++
			expect = cur.Revision
			_, ended = s.cache.lastGone(req.Name)
			continue
		}
		hdr := nats.Header{}
		if req.RequestID != "" {
			hdr.Set(jetstream.MsgIDHeader, grantMsgID(req))
		}
		if ended != nil && ended.rev == expect {
			ended.addTo(hdr)
		}
		sent := time.Now()
		rev, err := s.publish(ctx, req.Name, "grant", data, hdr, expect, ttl)
		switch {
		case err == nil:
			rec = Record{
				Name: req.Name, Holder: req.Holder, Token: Token(rev), Revision: rev,
				Duration: req.Duration, TTL: ttl, StoredAt: time.Now(), Attributes: req.Attributes,
				Secret: req.Secret, secretHash: sh, GrantTrace: tp, RequestID: req.RequestID,
			}
			rec.GrantedAt = rec.StoredAt
			s.cache.putSure(rec, sureUntil(sent, ttl), nil)
			return rec, nil
		case errors.Is(err, errDuplicate):
			// An earlier attempt of this request was stored at rev.
			return s.recoverGrant(ctx, req, Token(rev))
		case !errors.Is(err, errMismatch):
			return Record{}, err
		}
		cur, live, err := s.lastAtLeast(ctx, req.Name, mismatchFloor(err), 0)
		switch {
		case err != nil:
			return Record{}, err
		case live:
			return s.heldAnswer(req, cur)
		case cur.Revision == expect && waited < len(refusedCurrentBackoff):
			select {
			case <-time.After(refusedCurrentBackoff[waited]):
			case <-ctx.Done():
				return Record{}, translate("grant", ctx.Err())
			}
			waited++
			continue
		}
		changed++
		expect = cur.Revision
		_, ended = s.cache.lastGone(req.Name) // the read's tombstone, if it showed one
	}
	// Free at every read, yet every compare-and-set missed: the lease
	// changed hands that often, or a stale node (a stream leader being
	// replaced) answered while the new leader stored one of these
	// attempts. Not a refusal: a retry, with this request ID, finds out.
	return Record{}, fmt.Errorf("%w: lease %q changed under the grant three times; it may have been stored",
		ErrUnavailable, req.Name)
}

// heldAnswer is a grant's answer when a read shows cur live: the tenure
// an earlier attempt of the same request made, or a HeldError.
func (s *Store) heldAnswer(req GrantRequest, cur Record) (Record, error) {
	if req.RequestID != "" && cur.RequestID == req.RequestID && cur.secretMatches(req.Secret) {
		return s.recovered(req, cur)
	}
	return Record{}, &HeldError{Name: req.Name, Holder: cur.Holder, Token: cur.Token}
}

// validateTenure checks the token and revision a renewal or release
// names: revisions start at 1, so 0 (or a missing field) names nothing.
func validateTenure(token Token, rev uint64) error {
	if token == 0 || rev == 0 {
		return fmt.Errorf("%w: token %d, revision %d: a renewal or release names the tenure's token and its current revision, both above 0",
			ErrInvalidTenure, token, rev)
	}
	return nil
}

// checkRequestID checks a grant's request ID and, with one, its secret.
func checkRequestID(req GrantRequest) error {
	if req.RequestID == "" {
		return nil
	}
	if req.Secret == "" {
		return fmt.Errorf("%w: a request id needs a secret (a retry proves it is the same caller with it)", ErrInvalidRequestID)
	}
	return errors.Join(ValidateRequestID(req.RequestID), ValidateSecret(req.Secret))
}

// grantMsgID is the Nats-Msg-Id of a grant with a request ID: a hash of
// the lease name, the request ID and the secret, so that two callers that
// chose the same request ID never share it, and the secret cannot be read
// from it.
func grantMsgID(req GrantRequest) string {
	h := sha256.New()
	for _, f := range []string{req.Name, req.RequestID, req.Secret} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return "leased-grant-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// requestKey identifies the grant of name with request ID id and the
// secret whose hash is secretHash, as the end of its tenure names it
// (hdrRequest): neither the secret nor its hash can be read from it.
func requestKey(name, id, secretHash string) string {
	h := sha256.New()
	for _, f := range []string{name, id, secretHash} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// recoverGrant answers a grant whose message the stream dropped as a
// duplicate of one it stored at token: that tenure if it is still the
// current one, else [ErrRequestUsed].
func (s *Store) recoverGrant(ctx context.Context, req GrantRequest, token Token) (Record, error) {
	cur, live, err := s.lastAtLeast(ctx, req.Name, uint64(token), token)
	switch {
	case err != nil:
		return Record{}, err
	case !live || cur.Token != token:
		return Record{}, fmt.Errorf("%w: request %q granted %q with token %d, and that tenure has ended",
			ErrRequestUsed, req.RequestID, req.Name, token)
	case cur.RequestID != req.RequestID || !cur.secretMatches(req.Secret):
		// Not this caller's (a message ID collision): answered as held.
		return Record{}, &HeldError{Name: req.Name, Holder: cur.Holder, Token: cur.Token}
	}
	return s.recovered(req, cur)
}

// recovered returns cur, the tenure an earlier attempt of req made, as
// req's answer, if req asks for what that attempt asked for.
func (s *Store) recovered(req GrantRequest, cur Record) (Record, error) {
	var differ []string
	if cur.Holder != req.Holder {
		differ = append(differ, "holder")
	}
	if cur.Duration != req.Duration {
		differ = append(differ, "duration")
	}
	if !maps.Equal(cur.Attributes, req.Attributes) {
		differ = append(differ, "attributes")
	}
	if len(differ) > 0 {
		return Record{}, fmt.Errorf("%w: request %q for %q differs from the grant it made (token %d) in %s",
			ErrRequestMismatch, req.RequestID, req.Name, cur.Token, strings.Join(differ, ", "))
	}
	s.cache.put(cur)
	cur.Secret, cur.Recovered = req.Secret, true
	return cur, nil
}

// Renew extends the tenure named by (Holder, Token, Revision) for Duration
// (0: the tenure's current duration), with a compare-and-set on Revision
// that also sets a fresh TTL, in one publish (a plain KV update would drop
// the TTL). The returned record carries the new revision, which the next
// renewal must name.
//
// Under a ctx with a deadline, an attempt that goes unanswered (a stream
// leader failing over) is sent again, each bounded by a few seconds,
// while ctx allows.
//
// Errors: invalid input as for Grant; [ErrNotHolder] if Holder or Token do not
// match the lease or Revision is not current; [ErrNotFound] if the lease has
// lapsed or was released or revoked; [ErrUnavailable].
func (s *Store) Renew(ctx context.Context, req RenewRequest) (rec Record, err error) {
	ctx, span := s.startSpan(ctx, "renew", req.Name, telemetry.AttrHolder.String(req.Holder),
		telemetry.AttrToken.Int64(int64(req.Token)), telemetry.AttrDuration.Int64(req.Duration.Milliseconds()))
	defer func() { endSpan(span, &rec, err) }()
	if req.Duration != 0 {
		if err := s.CheckDuration(req.Duration); err != nil {
			return Record{}, err
		}
	}
	if err := errors.Join(ValidateName(req.Name), ValidateHolder(req.Holder), validateTenure(req.Token, req.Revision)); err != nil {
		return Record{}, err
	}
	// A revocation of the lease under way in this Store goes first.
	if err := s.revoking.wait(ctx, req.Name); err != nil {
		return Record{}, translate("renew", err)
	}
	// Each attempt is bounded (writeAttemptTimeout) and one that goes
	// unanswered is sent again while ctx allows. An attempt that went
	// unanswered may have been stored: the next is refused with the
	// tenure's newer revision, and renews from it (the claim is checked
	// on it again).
	unanswered := false
	rec, err = writeAttempts(ctx, func(error) { unanswered = true }, func(ctx context.Context) (Record, error) {
		rec, err := s.renew(ctx, req, span)
		var stale *StaleRevisionError
		if unanswered && errors.As(err, &stale) && stale.Revision > req.Revision {
			req.Revision = stale.Revision
			rec, err = s.renew(ctx, req, span)
		}
		return rec, err
	})
	if errors.Is(err, ErrStoreFull) {
		err = fmt.Errorf("%w (%q not renewed: its tenure lasts until its deadline, unless a renewal goes through once room is made)",
			err, req.Name)
	}
	return rec, err
}

// writeAttemptTimeout bounds one attempt of a renewal or release. A write
// to a stream whose leader has just died is dropped unanswered, and a read
// sent to it waits for its whole context: one attempt with the caller's
// whole deadline (20 s from `leased renew --timeout 20s`) failed through
// a failover while requests sent seconds later came through in 0.1 s
// (found by an outside client).
const writeAttemptTimeout = 2 * time.Second

// writeAttempts calls attempt with ctx bounded by writeAttemptTimeout,
// again while it returns [ErrUnavailable] and ctx allows
// ([RetryUnavailable], which calls onWait). A ctx without a deadline gets
// one attempt: a caller that set none decides whether to try again. Its
// requests are bounded all the same, as the JetStream context's own are
// (its DefaultTimeout for reads and single publishes, BatchLimits.Timeout
// for a batch's ack). A [StaleReadError] is answered at once: the attempt
// read again for a while already, and a revision never issued (a
// caller's mistake) reads as one; retried, it took the caller's whole
// deadline to say so. So is [ErrStoreFull], a write refused (not stored):
// tried again until the caller's deadline, a release through the service
// said only "context deadline exceeded" after 20 s, while a grant said the
// storage was full at once (found by an outside client).
func writeAttempts[T any](ctx context.Context, onWait func(error), attempt func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		return attempt(ctx)
	}
	var final error // answered at once, not tried again
	v, err := RetryUnavailable(ctx, time.Second, onWait, func() (T, error) {
		actx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
		defer cancel()
		v, err := attempt(actx)
		if sr := (*StaleReadError)(nil); errors.As(err, &sr) || errors.Is(err, ErrStoreFull) {
			final = err
			return v, nil
		}
		return v, err
	})
	if final != nil {
		var zero T
		return zero, final
	}
	return v, err
}

// renew is one attempt of Renew, whose input it has checked.
func (s *Store) renew(ctx context.Context, req RenewRequest, span trace.Span) (rec Record, err error) {
	claim := tenureClaim{name: req.Name, holder: req.Holder, token: req.Token, rev: req.Revision, secret: req.Secret,
		required: req.SecretRequired}
	cur, err := s.verify(ctx, claim)
	if err != nil {
		return Record{}, err
	}
	// The earliest the revision renewed may expire, taken before the write
	// moves the cache on.
	expires := s.cache.expiresBy(cur)
	tooLate := func() error {
		if left := time.Until(expires); left < renewGuard(cur.TTL) {
			// DESIGN §2 item 8: a renewal that lands as the revision expires
			// can be acknowledged and then rolled up by the expiry marker, an
			// acknowledged renewal lost. A holder that keeps its deadline never
			// renews this late; one that does (a zombie, a client that ignores
			// its deadline) is told the lease is gone.
			when := fmt.Sprintf("expires in %v", left.Round(time.Millisecond))
			if left <= 0 {
				when = fmt.Sprintf("expired %v ago", (-left).Round(time.Millisecond))
			}
			return fmt.Errorf("%w: %q %s, too late to renew; acquire a new tenure", ErrNotFound, req.Name, when)
		}
		return nil
	}
	if err := tooLate(); err != nil {
		return Record{}, err
	}
	if req.Duration == 0 {
		req.Duration = cur.Duration
		// The span said 0 ms for a renewal that kept the tenure's D.
		span.SetAttributes(telemetry.AttrDuration.Int64(req.Duration.Milliseconds()))
	}
	ttl := ServerTTL(req.Duration, s.o.grantorMargin)
	linkTo(span, cur.GrantTrace)
	// The tenure's fields, which a renewal carries forward: as the last
	// renewal of this Store's stored them, if it was for this duration.
	data := s.cache.renewal(req.Name, req.Revision, req.Duration)
	if data == nil {
		granted := cur.GrantedAt
		data = value{
			Holder: req.Holder, Token: req.Token, DurationMS: req.Duration.Milliseconds(),
			GrantedAt: &granted, Attributes: cur.Attributes, SecretHash: cur.secretHash, Trace: cur.GrantTrace,
			RequestID: cur.RequestID,
		}.encode()
	}
	var sent time.Time
	var rev uint64
	err = s.compareAndSet(ctx, claim, func() (err error) {
		if err := tooLate(); err != nil { // again on a retry
			return err
		}
		sent = time.Now()
		w := s.newWrite(ctx, req.Name, "renew", data, nil, req.Revision, ttl)
		w.tooLate = tooLate // again as it goes out, if it queues
		rev, err = s.write(w)
		return err
	})
	if stale := (*StaleRevisionError)(nil); errors.As(err, &stale) {
		// Refused for a newer revision of the tenure, learned of only now:
		// if the revision named has expired by now, that newer one may be
		// an earlier attempt that reached the server as it expired, which
		// the marker rolls up, as below. Answered with it, the Store's
		// retry and the holder's Lease.Renew renew it, and that renewal,
		// acknowledged in time for the newer revision, is lost with it.
		if lerr := tooLate(); lerr != nil {
			return Record{}, fmt.Errorf("%w (the tenure's revision %d was learned of only then)", lerr, stale.Revision)
		}
	}
	if err != nil {
		return Record{}, err
	}
	if err := tooLate(); err != nil {
		// Sent in time, acknowledged only as the revision expired: a write
		// held on its way (a stream with no leader until its new leader
		// took it) may have reached the server after the expiry timer took
		// the old revision, and the marker that follows rolls the renewal
		// up, acknowledged and lost (the fault suite: a grant to another
		// holder 0.5 s after such an ack). Not a renewal: the caller
		// acquires anew, as after any loss; what this write left, if it
		// stands, lapses by its TTL. The cache keeps its bound on the old
		// revision's expiry (from when the write that made it was sent):
		// forgotten, a retry naming that revision was measured against
		// the record's StoredAt (the ack's arrival), later by the round
		// trip and sureUntil's margin, and went out.
		return Record{}, fmt.Errorf("%w (the renewal was acknowledged only then, revision %d)", err, rev)
	}
	rec = cur
	rec.Revision, rec.Duration, rec.TTL, rec.StoredAt = rev, req.Duration, ttl, time.Now()
	s.cache.putSure(rec, sureUntil(sent, ttl), data)
	return rec, nil
}

// Release ends the tenure named by (Holder, Token, Revision) with a
// compare-and-purge that leaves a tombstone lasting the marker TTL. A
// tenure revoked since ([Store.Revoke]) is released all the same: its
// holder's release ends the revocation's hold, so the lease is free.
//
// Attempts as Renew's. Errors: as for Renew. [ErrNotFound] means there was
// nothing left to release (it lapsed, or an earlier release whose reply was
// lost succeeded).
func (s *Store) Release(ctx context.Context, req ReleaseRequest) (err error) {
	ctx, span := s.startSpan(ctx, "release", req.Name, telemetry.AttrHolder.String(req.Holder), telemetry.AttrToken.Int64(int64(req.Token)))
	var released Record // the tenure as it was released, for the span: its TTL
	defer func() { endSpan(span, &released, err) }()
	if err := errors.Join(ValidateName(req.Name), ValidateHolder(req.Holder), validateTenure(req.Token, req.Revision)); err != nil {
		return err
	}
	// Attempts as Renew's. A release stored by an attempt that went
	// unanswered is found by the next (releasedBy).
	released, err = writeAttempts(ctx, nil, func(ctx context.Context) (Record, error) {
		return s.release(ctx, req)
	})
	if errors.Is(err, ErrStoreFull) {
		err = fmt.Errorf("%w (%q not released: it stays held until its TTL runs out, unless a release goes through once room is made)",
			err, req.Name)
	}
	return err
}

// release is one attempt of Release, whose input it has checked. It
// returns the tenure it released, if it read it (not for a release found
// made already, or one that freed a revoked lease).
func (s *Store) release(ctx context.Context, req ReleaseRequest) (_ Record, err error) {
	claim := tenureClaim{name: req.Name, holder: req.Holder, token: req.Token, rev: req.Revision, secret: req.Secret,
		required: req.SecretRequired}
	var cur Record
	if cur, err = s.verify(ctx, claim); err == nil {
		err = s.compareAndSet(ctx, claim, func() error {
			_, err := s.purge(ctx, req.Name, "release", cur, "", req.Revision)
			return err
		})
		if err == nil {
			return cur, nil
		}
	}
	if errors.Is(err, ErrNotFound) {
		switch freed, ferr := s.freeRevoked(ctx, claim); {
		case ferr != nil:
			return Record{}, ferr
		case freed:
			return Record{}, nil
		}
	}
	if errors.Is(err, ErrNotFound) && s.releasedBy(ctx, claim) {
		return Record{}, nil // a retry of a release whose reply was lost
	}
	return Record{}, err
}

// opFree is the Leased-Op of the end that replaces a revocation's when the
// revoked holder releases the lease before the hold ends (freeRevoked). It
// ends no tenure: the revocation did.
const opFree = "free"

// freeRevoked lets the holder of a tenure revoked with a hold (see
// [Store.Revoke]) free the lease at once: a holder that releases has
// stopped, so nothing is left to wait for. It reads the last entry
// through the stream leader and, if it is the revocation of c's tenure
// (holder, token and secret), replaces it with an end that holds nothing,
// with a compare-and-set on its revision. Anything else is "not freed".
func (s *Store) freeRevoked(ctx context.Context, c tenureClaim) (bool, error) {
	m, err := s.leaderGet(ctx, msgGetRequest{LastFor: s.prefix + c.name})
	if err != nil || !Removed(m.Header) || m.Header.Get(hdrOp) != "revoke" || m.Header.Get(hdrHold) == "" ||
		!endOf(m.Header, c) {
		return false, nil
	}
	return s.free(ctx, c.name, tombstoneOf(m.Sequence, m.Time, m.Header), m.Header.Get(hdrSecretHash))
}

// free replaces t, the revocation of a tenure of name that holds the
// lease, with an end that holds nothing (opFree), with a compare-and-set
// on t's revision, and reports whether it did. secretHash (of the revoked
// tenure, if known) lets its holder's retried release succeed.
func (s *Store) free(ctx context.Context, name string, t *tombstone, secretHash string) (bool, error) {
	f := *t
	f.vals[slices.Index(tombstoneHeaders[:], hdrHold)] = ""
	hdr := f.header()
	hdr.Set(jetstream.MsgRollup, rollupSubj)
	if secretHash != "" {
		hdr.Set(hdrSecretHash, secretHash)
	}
	sent := time.Now()
	seq, err := s.publish(ctx, name, opFree, nil, hdr, t.rev, s.o.markerTTL)
	switch {
	case errors.Is(err, errMismatch):
		return false, nil // changed meanwhile
	case err != nil:
		return false, err
	}
	s.cache.set(name, cacheEntry{rec: Record{Revision: seq}, gone: true, sure: sureUntil(sent, s.o.markerTTL),
		ended: tombstoneOf(seq, time.Now(), hdr)})
	return true, nil
}

// endOf reports whether h, the headers of an end, name c's tenure and
// pass c's checks on it as the tenure's record would (owns): an end of a
// tenure granted without a secret is no one's to free through a caller
// that must prove one (a release with any secret freed its hold; found in
// review).
func endOf(h nats.Header, c tenureClaim) bool {
	token, err := strconv.ParseUint(h.Get(hdrToken), 10, 64)
	return err == nil && c.owns(Record{Holder: h.Get(hdrHolder), Token: Token(token), secretHash: h.Get(hdrSecretHash)}) == nil
}

// releasedBy reports whether the last entry of c's lease is the release
// of c's tenure (holder, token) by the holder of c's secret, or its
// freeing after a revocation: a retried release of it succeeds. It reads
// through the stream leader; any error is "no".
func (s *Store) releasedBy(ctx context.Context, c tenureClaim) bool {
	m, err := s.leaderGet(ctx, msgGetRequest{LastFor: s.prefix + c.name})
	if err != nil {
		return false
	}
	op := m.Header.Get(hdrOp)
	return (op == "release" || op == opFree) && endOf(m.Header, c)
}

// Revoke ends whatever tenure the lease has, regardless of holder, and
// returns the record it ended. reason is stored with the tombstone and shows
// in watch events.
//
// The revoked holder stops only when it hears of the revocation: at its
// next renewal, which is refused, or sooner from a watch (a keeper with
// [WithRenewNow], `leased run`). One that does not hear of it (paused,
// cut off) still counts the lease as held until its deadline. So by
// default the lease stays held, no grant allowed, for the tenure's TTL
// from the revocation: the holder's deadline passes first, as it would
// had the lease lapsed (grants are refused with a [HeldError] whose
// HeldBack says how long is left). [FreeNow] frees it at once instead,
// for a holder known to be gone or a resource that checks tokens; also of
// a lease that an earlier revocation still holds (it returns the revoked
// tenure's name, holder and token then).
//
// While it runs, renewals of the lease through this Store wait for it, so
// that a holder renewing back to back through the same grantor cannot win
// every compare-and-set; renewals through other Stores race it, and each
// lost race is tried again while ctx allows.
//
// Errors: [ErrInvalidName]; [ErrInvalidOption] for the reason
// [ResurrectedReason], which is the grantor's own; [ErrNotFound] if no
// tenure is live (and, with FreeNow, no revocation holds the lease), or,
// with [OnlyTenure], that tenure is not the live one; [ErrUnavailable].
func (s *Store) Revoke(ctx context.Context, name, reason string, opts ...RevokeOption) (rec Record, err error) {
	o := NewRevocation(opts...)
	ctx, span := s.startSpan(ctx, "revoke", name, telemetry.AttrReason.String(reason))
	defer func() { endSpan(span, &rec, err) }()
	if err := ValidateName(name); err != nil {
		return Record{}, err
	}
	if err := ValidateReason(reason); err != nil {
		return Record{}, err
	}
	span.SetAttributes(telemetry.AttrFreeNow.Bool(o.FreeNow))
	// Each attempt reads and compare-and-sets within revokeAttemptTimeout:
	// a read sent to a stream leader that has just died waits for its
	// whole context, and one attempt with the caller's whole deadline
	// failed through every failover, while gets and grants came through
	// (found by an outside client). An attempt that went unanswered may
	// have been carried out: the next finds its tombstone and answers
	// with the tenure it revoked. A holder renewing back to back wins
	// some of the compare-and-sets (on R3, 5 revocations in 15 failed):
	// they are tried again too, while ctx allows; and this Store's
	// renewals of the lease wait for the revocation: a holder renewing
	// back to back through it won every compare-and-set for 10 s on a
	// loaded machine (TestRevokeThroughFailoverAndRenewals).
	defer s.revoking.start(name)()
	var revoking Record // what an earlier attempt revoked or freed, if it was carried out
	for wait := time.Duration(0); ; {
		actx, cancel := context.WithTimeout(ctx, revokeAttemptTimeout)
		rec, err = s.revokeOnce(actx, name, reason, o, &revoking)
		cancel()
		switch {
		case errors.Is(err, ErrStoreFull):
			// Refused, not unanswered: said at once, as a grant's is (tried
			// again, it said "context deadline exceeded" when the caller's
			// deadline came; found by an outside client).
			return Record{}, fmt.Errorf("%w (%q not revoked: its tenure stays live, unless a revocation goes through once room is made)",
				err, name)
		case err == nil, !errors.Is(err, errMismatch) && !errors.Is(err, ErrUnavailable):
			return rec, err
		case ctx.Err() != nil && errors.Is(err, errMismatch):
			return Record{}, fmt.Errorf("%w: lease %q was renewed under every attempt to revoke it", ErrUnavailable, name)
		case ctx.Err() != nil:
			return Record{}, err
		case errors.Is(err, ErrUnavailable):
			wait = min(max(2*wait, 50*time.Millisecond), time.Second)
		default:
			wait = 0 // lost a race with a renewal: at once
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
}

// revocations are the leases a Revoke of a Store is revoking, whose
// renewals through that Store wait until it is done. Renewals through other
// Stores (another grantor node) still race it: Revoke tries again while
// its ctx allows.
type revocations struct {
	mu sync.Mutex
	m  map[string]*revocation
}

type revocation struct {
	n    int           // Revoke calls on the lease
	done chan struct{} // closed when the last has returned
}

// start notes a revocation of name and returns the func that ends it.
func (r *revocations) start(name string) (end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*revocation{}
	}
	v := r.m[name]
	if v == nil {
		v = &revocation{done: make(chan struct{})}
		r.m[name] = v
	}
	v.n++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if v.n--; v.n == 0 {
			delete(r.m, name)
			close(v.done)
		}
	}
}

// wait returns when no revocation of name is under way, or with ctx's
// error when ctx ends first.
func (r *revocations) wait(ctx context.Context, name string) error {
	r.mu.Lock()
	v := r.m[name]
	r.mu.Unlock()
	if v == nil {
		return nil
	}
	select {
	case <-v.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// revokeAttemptTimeout bounds one attempt of Store.Revoke.
const revokeAttemptTimeout = 2 * time.Second

// revokeOnce is one attempt of Revoke: a read, and a compare-and-set on
// what it shows. *revoking is what an earlier attempt tried to end; one
// that finds that attempt's tombstone was carried out. Errors: those of
// Revoke, and errMismatch (the lease changed under the attempt).
func (s *Store) revokeOnce(ctx context.Context, name, reason string, o Revocation, revoking *Record) (Record, error) {
	cur, live, err := s.lastAtLeast(ctx, name, 0, o.Token) // a read older than the tenure named is stale
	if sr := (*StaleReadError)(nil); errors.As(err, &sr) && o.Token != 0 {
		// Or the tenure named was never granted (a token mistyped): it
		// was re-read until the caller's deadline and answered
		// "unavailable".
		if info, ierr := s.stream.Info(ctx); ierr == nil && uint64(o.Token) > info.State.LastSeq {
			return Record{}, fmt.Errorf("%w: %q: no tenure %d (the bucket's revisions end at %d)", ErrNotFound, name, o.Token,
				info.State.LastSeq)
		}
		// Or the token is a revision of another lease (one of the
		// bucket's revisions, which all leases share): the message at
		// that sequence, whoever serves it, is another subject's, so no
		// tenure of name has that token, however stale the read.
		if m, gerr := s.leaderGet(ctx, msgGetRequest{Seq: uint64(o.Token)}); gerr == nil && (m.Subject != s.prefix+name || Removed(m.Header)) {
			return Record{}, fmt.Errorf("%w: %q: no tenure %d (revision %d is not a grant of %q)", ErrNotFound, name, o.Token,
				o.Token, name)
		}
	}
	if err != nil {
		return Record{}, err
	}
	if live && o.Token != 0 && cur.Token != o.Token {
		return Record{}, fmt.Errorf("%w: %q: tenure %d has ended (tenure %d holds it)", ErrNotFound, name, o.Token, cur.Token)
	}
	if !live {
		rev, t := s.cache.lastGone(name)
		if t == nil || rev != cur.Revision {
			return Record{}, fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		// The end of the tenure an earlier attempt was revoking (its
		// reply lost): done, unless FreeNow finds it holding the lease
		// (another revocation of the tenure, without FreeNow, came
		// first), which it frees below.
		op := t.get(hdrOp)
		ours := revoking.Token != 0 && t.get(hdrToken) == strconv.FormatUint(uint64(revoking.Token), 10) &&
			(op == "revoke" || op == opFree)
		if ours && (!o.FreeNow || t.get(hdrHold) == "") {
			return *revoking, nil
		}
		left, held := s.heldBack(ctx, t)
		holder, token := t.get(hdrHolder), Token(parseUint(t.get(hdrToken)))
		switch {
		case !held && ours:
			return *revoking, nil
		case !held, o.Token != 0 && token != o.Token:
			return Record{}, fmt.Errorf("%w: %q", ErrNotFound, name)
		case !o.FreeNow:
			return Record{}, fmt.Errorf("%w: %q %s; FreeNow (revoke --now, the API's free_now) frees it", ErrNotFound, name,
				(&HeldError{Holder: holder, Token: token, HeldBack: left}).revoked())
		}
		*revoking = Record{Name: name, Holder: holder, Token: token}
		switch freed, err := s.free(ctx, name, t, t.secretHash); {
		case err != nil:
			return Record{}, err
		case !freed:
			return Record{}, errMismatch
		}
		return *revoking, nil
	}
	var hold time.Duration
	if !o.FreeNow {
		// At least what is left of the tenure's TTL at the server, which
		// the holder's deadline is inside.
		hold = cmp.Or(cur.TTL, ServerTTL(cur.Duration, s.o.grantorMargin))
	}
	*revoking = cur
	if _, err := s.purgeHolding(ctx, name, "revoke", cur, reason, cur.Revision, hold); err != nil {
		return Record{}, err
	}
	return cur, nil
}

// Revocation is how [Store.Revoke] ends a tenure.
type Revocation struct {
	// FreeNow frees the lease at once: the next grant may come before the
	// revoked holder's deadline, while a holder that has not heard of the
	// revocation still counts the lease as held. Use it only when the
	// holder is known to be gone, or the resource checks tokens ([fence]).
	FreeNow bool
	// Token, if not 0, is the tenure to revoke: a lease another tenure
	// holds (granted after this one ended) is left alone, and Revoke
	// returns [ErrNotFound]. 0: whatever tenure holds the lease.
	Token Token
}

// RevokeOption configures [Store.Revoke].
type RevokeOption func(*Revocation)

// FreeNow frees a revoked lease at once (see [Revocation]).
func FreeNow() RevokeOption { return func(r *Revocation) { r.FreeNow = true } }

// OnlyTenure revokes the lease only while token's tenure holds it (see
// [Revocation]): for a caller that decided to end the tenure it saw, not
// whatever holds the name by the time the revocation arrives.
func OnlyTenure(token Token) RevokeOption { return func(r *Revocation) { r.Token = token } }

// NewRevocation is the revocation opts describe, for a grantor that
// passes them on (the service's client sends them in its request).
func NewRevocation(opts ...RevokeOption) Revocation {
	var r Revocation
	for _, o := range opts {
		if o != nil {
			o(&r)
		}
	}
	return r
}

// Get returns the live tenure of a lease, read through the stream leader. It
// is current when read; the lease can change the next moment, so decide with
// Grant, Renew or Release, which compare-and-set.
//
// Errors: [ErrInvalidName]; [ErrNotFound]; [ErrUnavailable].
func (s *Store) Get(ctx context.Context, name string) (Record, error) {
	if err := ValidateName(name); err != nil {
		return Record{}, err
	}
	rec, live, err := s.last(ctx, name)
	if err != nil {
		return Record{}, err
	}
	if !live {
		_, t := s.cache.lastGone(name) // the read's, if the cache has kept it
		if held, _ := s.heldBy(ctx, name, rec.Revision, t); held != nil {
			// No tenure is live, yet a grant is refused: say why.
			return Record{}, fmt.Errorf("%w: %q %s", ErrNotFound, name, held.revoked())
		}
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return rec, nil
}

// Last returns the last entry the bucket keeps of a lease, read through the
// stream leader: its live tenure (live true); or, with live false, the
// revision of the entry that ended the last one (a release's or a
// revocation's tombstone, the server's marker of an expiry), 0 if the bucket
// keeps no entry of it at all (its end's own TTL has lapsed: a watch started
// since sees nothing of the lease). Get is the read for a caller that needs
// only the live tenure.
//
// Errors: [ErrInvalidName]; [ErrUnavailable].
func (s *Store) Last(ctx context.Context, name string) (rec Record, live bool, err error) {
	if err := ValidateName(name); err != nil {
		return Record{}, false, err
	}
	return s.last(ctx, name)
}

// heldBy is the refusal a grant of name would meet if its last entry, at
// revision rev, is t, a revocation whose hold has not passed; else nil.
// known is false if t is not the entry at rev (nil, or another's): then
// the store does not know what it holds, though it knows its revision (its
// cache drops entries when full), and only a read can tell.
func (s *Store) heldBy(ctx context.Context, name string, rev uint64, t *tombstone) (held *HeldError, known bool) {
	if rev == 0 {
		return nil, true // no entry: nothing holds it
	}
	if t == nil || t.rev != rev {
		return nil, false
	}
	left, isHeld := s.heldBack(ctx, t)
	if !isHeld {
		return nil, true
	}
	return &HeldError{Name: name, Holder: t.get(hdrHolder), Token: Token(parseUint(t.get(hdrToken))), HeldBack: left}, true
}

// List returns the live leases whose names start with prefix ("" for all),
// in name order. It replays the bucket's current state through a consumer;
// for a view that stays current, use [Store.Watch].
func (s *Store) List(ctx context.Context, prefix string) ([]Record, error) {
	w, err := s.Watch(ctx, prefix)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	// Fold every event, replayed or not, until the watcher has caught up:
	// a lease renewed during the replay arrives as its renewal.
	state := make(map[string]Record)
	err = w.CatchUp(ctx, func(ev Event) error {
		if ev.Type.Ends() {
			delete(state, ev.Name)
		} else {
			state[ev.Name] = *ev.Record
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Records the server kept past their TTL are not live (OverdueGrace).
	for _, r := range s.Overdue(ctx, maps.Values(state)) {
		delete(state, r.Name)
	}
	out := slices.Collect(maps.Values(state))
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// tenureClaim is what a renewal or release presents as its proof of tenure.
type tenureClaim struct {
	name, holder string
	token        Token
	rev          uint64 // the revision the caller was last given
	secret       string
	required     bool // refuse a tenure granted without a secret
}

// owns checks that cur is the claimed tenure: holder, token and secret. It
// is the first check on any record, before anything that depends on the
// revision, so that a caller that is not the holder learns nothing of the
// tenure's revisions.
func (c tenureClaim) owns(cur Record) error {
	if cur.Holder != c.holder || cur.Token != c.token {
		return fmt.Errorf("%w: %q is held by %q with token %d, not %q with token %d",
			ErrNotHolder, c.name, cur.Holder, cur.Token, c.holder, c.token)
	}
	if c.required && cur.secretHash == "" {
		return fmt.Errorf("%w: %q was granted without a secret; only its holder's own store may renew or release it", ErrNotHolder, c.name)
	}
	if !cur.secretMatches(c.secret) {
		return fmt.Errorf("%w: wrong secret for %q", ErrNotHolder, c.name)
	}
	return nil
}

// verify checks that the claim names the current tenure as far as the
// store can tell before writing; the compare-and-set that follows is what
// makes it exact. Revisions are immutable, so the record at the claimed
// revision is read once (from the cache of our own writes, or by sequence)
// and compared.
func (s *Store) verify(ctx context.Context, c tenureClaim) (Record, error) {
	cur, ok := s.cache.get(c.name, c.rev)
	if !ok {
		m, err := s.leaderGet(ctx, msgGetRequest{Seq: c.rev})
		if isLeaderless(err) {
			// No meta leader (a departed node still counted, one more
			// down) refuses every API read while the stream's own group
			// commits. The message at a sequence never changes, so any
			// replica that has it may say what it is; one that has not
			// applied it yet says nothing, and the leader's answer stands.
			if dm, derr := s.directGetSeq(ctx, c.rev); derr == nil {
				m, err = dm, nil
			}
		}
		switch {
		case errors.Is(err, errNoMessage):
			return Record{}, s.explainMismatch(ctx, c, errMismatch)
		case err != nil:
			return Record{}, translate("read revision", err)
		case m.Subject != s.prefix+c.name || Removed(m.Header):
			return Record{}, fmt.Errorf("%w: revision %d is not a tenure of %q", ErrNotHolder, c.rev, c.name)
		}
		if cur, err = s.decode(c.name, m); err != nil {
			return Record{}, err
		}
	}
	if err := c.owns(cur); err != nil {
		return Record{}, err
	}
	cur.Secret = ""
	return cur, nil
}

// compareAndSet runs cas, a write that expects claim's revision, and
// explains a refusal (explainMismatch). A refusal of a revision that the
// read after it shows current is tried again, while ctx allows, up to
// len(refusedCurrentBackoff) times: on R3 the stream leader refuses a
// compare-and-set on a subject while another write that checks it is in
// process (10164), and nats-server 2.15.2 still does so for a moment after
// it has acknowledged that write, so a holder renewing right after its own
// write was refused (TestWritesRefusedWhileSubjectInProcess). Trying again
// is always safe: the write takes effect only if the revision is still the
// expected one, and a context capped at the holder's deadline sends
// nothing after it.
func (s *Store) compareAndSet(ctx context.Context, claim tenureClaim, cas func() error) error {
	for i := 0; ; i++ {
		err := s.explainMismatch(ctx, claim, cas())
		var stale *StaleReadError
		if !errors.As(err, &stale) || stale.Seen != stale.Floor || i == len(refusedCurrentBackoff) {
			return err
		}
		select {
		case <-time.After(refusedCurrentBackoff[i]):
		case <-ctx.Done():
			return err
		}
		if ctx.Err() != nil {
			return err
		}
	}
}

// ended is the error for a claim c whose tenure is no longer live:
// ErrNotFound saying how it ended (howEnded), or ErrNotHolder if the end
// names c's tenure and c fails the checks it would fail on the live
// tenure (owns: its secret, or none where one must be proved): those come
// before anything else is told (a wrong secret was answered "expired",
// with the revocation's reason; found by an outside client).
func (s *Store) ended(c tenureClaim) error {
	if _, t := s.cache.lastGone(c.name); t != nil && t.get(hdrToken) == strconv.FormatUint(uint64(c.token), 10) {
		holder := cmp.Or(t.get(hdrHolder), c.holder) // an end may not name it
		if err := c.owns(Record{Holder: holder, Token: c.token, secretHash: t.secretHash}); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %q %s", ErrNotFound, c.name, s.howEnded(c))
}

// howEnded says how the claim's tenure ended, from the tombstone the read
// that found it gone left in the cache, if that tombstone is the tenure's
// own: a holder whose tenure was revoked learns by whom's word ("was
// revoked: maintenance"), not "lapsed or was released or revoked" (found
// by an outside client, whose revoked `leased run` could not say why it
// stopped).
func (s *Store) howEnded(c tenureClaim) string {
	const unknown = "lapsed or was released or revoked"
	_, t := s.cache.lastGone(c.name)
	if t == nil || t.get(hdrToken) != strconv.FormatUint(uint64(c.token), 10) {
		return unknown
	}
	switch t.get(hdrOp) {
	case "release":
		return "was released"
	case "revoke":
		if r := t.get(hdrReason); r != "" {
			return fmt.Sprintf("was revoked: %s", r)
		}
		return "was revoked"
	case opExpire:
		return "lapsed (the NATS server kept it past its TTL; leased ended it)"
	}
	return unknown
}

// refusedCurrentBackoff spaces the retries of a compare-and-set refused
// though its revision is current: the other write in process is applied
// within a raft commit, milliseconds.
var refusedCurrentBackoff = []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 40 * time.Millisecond}

// explainMismatch turns a failed compare-and-set into the error a holder
// needs: the lease is gone, or someone else's, or only its revision is old.
// The read that explains it is evidence, not truth: one that shows the
// lease below the caller's revision or token (a deposed stream leader
// answering from its frozen state) is re-read, and if it stays below,
// answered [ErrUnavailable] ([StaleReadError]), never not-holder: the caller
// is not refused but asks again. The current record must pass the claim's
// holder, token and secret checks before its revision is named, so a caller
// without the secret never learns it or gets a conflict.
func (s *Store) explainMismatch(ctx context.Context, c tenureClaim, err error) error {
	if !errors.Is(err, errMismatch) {
		return err
	}
	cur, live, lerr := s.lastAtLeast(ctx, c.name, max(c.rev, mismatchFloor(err)), c.token)
	switch {
	case lerr != nil:
		return lerr
	case !live:
		return s.ended(c)
	}
	if err := c.owns(cur); err != nil {
		return err
	}
	if cur.Revision <= c.rev {
		// lastAtLeast re-read anything below c.rev; at c.rev, the
		// compare-and-set said "not at rev" and the read says "at rev": one
		// of the two answers came from a node that is behind.
		return &StaleReadError{Name: c.name, Seen: cur.Revision, Floor: c.rev}
	}
	return &StaleRevisionError{Name: c.name, Revision: cur.Revision}
}

// last reads the latest entry for name. live is false if there is none or
// it is a release, revocation or expiry marker; then rec.Revision is the
// marker's revision (0 if none), the one a new grant must name. A read
// below the last revision this Store wrote or saw for name is stale: see
// lastAtLeast.
func (s *Store) last(ctx context.Context, name string) (rec Record, live bool, err error) {
	return s.lastAtLeast(ctx, name, 0, 0)
}

// staleReadBackoff spaces the re-reads of a read found stale. A stream
// leader that was paused past an election answers from its frozen state
// only until it hears of the new term, milliseconds after it resumes.
var staleReadBackoff = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond}

// lastAtLeast is last for a caller that has been shown revision rev and
// token of name (0: none). Revisions of a subject only grow, and a token
// is the revision of its grant, so an entry below rev, below the last
// revision this Store wrote or saw for name, or a tenure older than token,
// cannot be the current one: it is re-read, and [StaleReadError] if it
// stays so. "No entry at all" is not compared (a tombstone's own TTL ends
// it). Bucket revisions reset only if the bucket is recreated, which breaks
// fencing: then these reads stay unavailable rather than grant again.
func (s *Store) lastAtLeast(ctx context.Context, name string, rev uint64, token Token) (rec Record, live bool, err error) {
	for i := 0; ; i++ {
		floor := max(rev, uint64(token), s.cache.revision(name))
		rec, live, err = s.readLast(ctx, name)
		seen := rec.Revision
		if err != nil || seen == 0 || seen >= floor && (!live || rec.Token >= token) {
			return rec, live, err
		}
		if i == len(staleReadBackoff) {
			// At most a line a second: a revision above the lease's, which
			// no grantor issued, reads as stale too, and the service's
			// callers may send one at will (a line each, 1,000 in 5 s;
			// found by an outside client).
			if skipped, ok := s.staleLog.Allow(); ok {
				s.log.Info("stale read of a lease", "lease", name, "revision", seen, "token", rec.Token,
					"floor", floor, "caller_token", token, "others_not_logged", skipped)
			}
			return Record{}, false, &StaleReadError{Name: name, Seen: seen, Floor: floor}
		}
		select {
		case <-time.After(staleReadBackoff[i]):
		case <-ctx.Done():
			return Record{}, false, translate("read lease", ctx.Err())
		}
	}
}

func (s *Store) readLast(ctx context.Context, name string) (rec Record, live bool, err error) {
	m, err := s.leaderGet(ctx, msgGetRequest{LastFor: s.prefix + name})
	switch {
	case errors.Is(err, errNoMessage):
		// The subject is empty (another store's release whose tombstone
		// has lapsed): what the cache was sure of no longer holds.
		s.cache.unsure(name)
		return Record{Name: name}, false, nil
	case err != nil:
		return Record{}, false, translate("read lease", err)
	case Removed(m.Header):
		s.cache.markGone(name, tombstoneOf(m.Sequence, m.Time, m.Header))
		return Record{Name: name, Revision: m.Sequence}, false, nil
	}
	if rec, err = s.decode(name, m); err != nil {
		return rec, false, err
	}
	if s.overdue(ctx, rec) {
		s.log.Warn("lease record outlived its TTL on the NATS server; taken as lapsed", "lease", name,
			"holder", rec.Holder, "token", rec.Token, "expired_at", rec.ExpiresAt())
		s.cache.markGone(name, overdueTombstone(rec))
		return Record{Name: name, Revision: rec.Revision}, false, nil
	}
	return rec, true, nil
}

// OverdueGrace is how far past its expiry (StoredAt + TTL), by the NATS
// server's clock, a lease's record must be for a Store to take it as
// lapsed although the server still holds it. nats-server v2.15.2 can lose
// a TTL expiry: it writes no tombstone for a message it removes by TTL, so
// rebuilding its index after an unclean stop (SIGKILL, power loss) brings
// such messages back, and those below where it rescans its TTL state
// never lapse again (nats-server issue 8505): a lease held for good by a
// holder long gone. Reads answer such a record as lapsed (a grant takes
// the lease over it, with a compare-and-set on its revision), and
// [Store.EndOverdue] writes its end. Both clocks must agree, this
// machine's and then the server's (the time of a stream info request), so
// that a step of either alone never ends a live tenure; the grace covers
// the server's own lateness in lapsing a key and the offset between the
// clocks of a cluster's nodes.
const OverdueGrace = 10 * time.Second

// OverdueGrace returns the store's grace for records the server kept
// past their TTL ([WithOverdueGrace]).
func (s *Store) OverdueGrace() time.Duration { return s.o.overdueGrace }

// overdueReason is the reason an overdue record's end gives.
//
// A server behind on its expiries is one cause: a bench granting 1,000-2,000
// 5 s leases a second on one node (R1, no restart) had 146 of 25,000 kept
// more than OverdueGrace past their TTL, whose history said only an
// unclean restart or a stream without quorum (found by an outside client).
const overdueReason = "the NATS server kept the lease past its TTL (no expiry marker came: a server behind on its expiries, as under a burst of short leases, " +
	"an expiry lost over an unclean restart, or a stream without quorum when it was due); leased ended it"

// overdue reports whether rec, a live record as stored, is past its
// expiry by the grace on this machine's clock and on the server's.
func (s *Store) overdue(ctx context.Context, rec Record) bool {
	if !pastBy(rec, time.Now(), s.o.overdueGrace) {
		return false // the common case, on every read: nothing to allocate
	}
	return len(s.Overdue(ctx, slices.Values([]Record{rec}))) == 1
}

// pastBy reports whether rec's expiry plus grace is before now.
func pastBy(rec Record, now time.Time, grace time.Duration) bool {
	return rec.TTL > 0 && now.After(rec.ExpiresAt().Add(grace))
}

// Overdue returns the records of recs (live records as read from the
// bucket, a watch's among them) that the server has kept past their
// expiry by the grace ([OverdueGrace]): [Store.Expired] with that grace.
// They are not live: a view of the live leases leaves them out.
func (s *Store) Overdue(ctx context.Context, recs iter.Seq[Record]) []Record {
	return s.Expired(ctx, recs, s.o.overdueGrace)
}

// Expired returns the records of recs (live records as read, a watch's
// among them) past their expiry by grace: by this machine's clock and
// then by the server's, which one request reads for all of them, and only
// if some record is past it by this machine's; so a clock step of either
// alone hides no live lease. A record past its expiry by both has lapsed
// (the server removes it) or been kept past its TTL (see [OverdueGrace]):
// a view that is behind the bucket (a watch of a node that was paused) can
// leave it out.
func (s *Store) Expired(ctx context.Context, recs iter.Seq[Record], grace time.Duration) []Record {
	now := time.Now()
	var due []Record
	for rec := range recs {
		if pastBy(rec, now, grace) {
			due = append(due, rec)
		}
	}
	if len(due) == 0 {
		return nil
	}
	serverNow, err := s.ServerTime(ctx)
	if err != nil {
		s.log.Info("cannot read the NATS server's time to confirm expired leases", "leases", len(due), "err", err)
		return nil
	}
	return slices.DeleteFunc(due, func(rec Record) bool { return !pastBy(rec, serverNow, grace) })
}

// ServerTime reads the wall clock of the NATS server that leads the
// bucket's stream (the time of a stream info reply), by whose clock the
// server lapses leases. Zero from a server that does not tell it.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return time.Time{}, JetStreamError("read the server's time", err)
	}
	return info.TimeStamp, nil
}

// overdueTombstone is the end of rec, which the server kept past its TTL,
// as the grant that replaces it carries it (and EndOverdue writes it).
func overdueTombstone(rec Record) *tombstone {
	h := nats.Header{}
	h.Set(hdrOp, opExpire)
	setEnd(h, rec, overdueReason)
	t := tombstoneOf(rec.Revision, rec.ExpiresAt(), h)
	t.overdue = true
	return t
}

// setEnd sets in h the headers of an end that say which tenure, cur,
// ended, and why (reason, if not "").
func setEnd(h nats.Header, cur Record, reason string) {
	h.Set(hdrHolder, cur.Holder)
	h.Set(hdrToken, strconv.FormatUint(uint64(cur.Token), 10))
	if !cur.GrantedAt.IsZero() {
		h.Set(hdrGranted, cur.GrantedAt.UTC().Format(time.RFC3339Nano))
	}
	if reason != "" {
		h.Set(hdrReason, reason)
	}
	if cur.RequestID != "" {
		h.Set(hdrRequest, requestKey(cur.Name, cur.RequestID, cur.secretHash))
	}
	if cur.Duration > 0 {
		h.Set(hdrDuration, strconv.FormatInt(cur.Duration.Milliseconds(), 10))
	}
	if cur.GrantTrace != "" {
		h.Set(hdrTrace, cur.GrantTrace)
	}
	if cur.secretHash != "" {
		// So that a retried release proves itself as the first did (a
		// wrong secret, or none, was answered "released"; found by an
		// outside client). The hash, as the record's value has it.
		h.Set(hdrSecretHash, cur.secretHash)
	}
}

// opExpire is the Leased-Op of the end EndOverdue writes: an expiry, as
// the server's marker would have been.
const opExpire = "expire"

// EndOverdue ends the tenure of name if the server has kept its record
// past the record's expiry (see [OverdueGrace]): it writes the end, an
// expiry, with a compare-and-set on the record's revision, and reports
// whether it did. Nothing else is touched: a record that is live, gone, or
// changed meanwhile is left as it is. A grantor's observer calls it for
// the tenures it sees outlive their TTL, so that watchers and the history
// see them end. It logs nothing: the caller reports what it ended (an
// unclean restart can bring back thousands).
func (s *Store) EndOverdue(ctx context.Context, name string) (bool, error) {
	_, ended, err := s.endIf(ctx, name, opExpire, overdueReason, func(rec Record) bool { return s.overdue(ctx, rec) })
	return ended, err
}

// MaxReasonLen bounds a revocation's reason, in bytes.
const MaxReasonLen = 512

// ValidateReason checks a revocation's reason: at most [MaxReasonLen]
// bytes, since it is copied into the tombstone, each change event, watch
// output and the history (an outside client's 5,000 were), and not the
// grantor's own [ResurrectedReason], whose end the history and change
// events skip. Errors: [ErrInvalidOption].
func ValidateReason(reason string) error {
	switch {
	case reason == ResurrectedReason:
		return fmt.Errorf("%w: the revocation reason %q is the grantor's own", ErrInvalidOption, reason)
	case len(reason) > MaxReasonLen:
		return fmt.Errorf("%w: a revocation reason of %d bytes, over %d", ErrInvalidOption, len(reason), MaxReasonLen)
	}
	return nil
}

// ResurrectedReason is the reason of the end [Store.EndResurrected] writes.
const ResurrectedReason = "the tenure had ended, and the NATS server brought it back over an unclean restart (nats-server issue 8505); leased ended it again"

// opEndAgain is the Leased-Op of the end EndResurrected writes, which
// only it writes: reported as a revocation with [ResurrectedReason].
const opEndAgain = "end-again"

// EndResurrected ends tenure (its name, holder, token, grant time and
// revision) if its record is the lease's live one, as [Store.EndOverdue]
// does for one past its expiry, with a compare-and-set on the revision: a
// tenure renewed since tenure was read has a holder at work, and is left
// alone (found in review: it was ended, without hold). It is
// reported as a revocation with the reason [ResurrectedReason], and frees
// the lease at once. It is for a tenure known to have ended (a grantor's
// observer reads its end in the history) that the server brought back
// after an unclean stop, live until its own expiry: released tenures come
// back so once their tombstone has lapsed (found by an outside client: a
// resigned leader back for ten minutes). A watch that has not seen the
// tenure live does not report this end.
func (s *Store) EndResurrected(ctx context.Context, tenure Record) (bool, error) {
	_, ended, err := s.endIf(ctx, tenure.Name, opEndAgain, ResurrectedReason, func(rec Record) bool {
		return rec.Token == tenure.Token && rec.Holder == tenure.Holder && rec.GrantedAt.Equal(tenure.GrantedAt) &&
			rec.Revision == tenure.Revision
	})
	return ended, err
}

// EndAbandoned ends tenure (its name, holder, token and revision) if its
// record is still the lease's live one, as a revocation for reason that
// frees the lease at once ([FreeNow]), with a compare-and-set on the
// revision, and reports whether it did: a tenure renewed or ended since
// tenure was read is left alone. It is for a tenure whose holder is known
// to have stopped without ending it, never one that may still be at work:
// its holder's deadline does not move, and a paused holder would go on
// past the end. A grantor ends so the observer lease its own process held
// before a restart (grantor.WithSuccession). Errors: [ErrInvalidName],
// [ErrInvalidOption] for a reason [ValidateReason] refuses,
// [ErrUnavailable].
func (s *Store) EndAbandoned(ctx context.Context, tenure Record, reason string) (bool, error) {
	if err := ValidateReason(reason); err != nil {
		return false, err
	}
	_, ended, err := s.endIf(ctx, tenure.Name, "revoke", reason, func(rec Record) bool {
		return rec.Token == tenure.Token && rec.Holder == tenure.Holder && rec.Revision == tenure.Revision
	})
	return ended, err
}

// endIf ends name's live tenure, read through the stream leader, with a
// tombstone of op and reason if cond holds for its record, with a
// compare-and-set on its revision, and reports whether it did: nothing is
// touched if the lease is free, or changed meanwhile.
func (s *Store) endIf(ctx context.Context, name, op, reason string, cond func(Record) bool) (Record, bool, error) {
	if err := ValidateName(name); err != nil {
		return Record{}, false, err
	}
	m, err := s.leaderGet(ctx, msgGetRequest{LastFor: s.prefix + name})
	switch {
	case errors.Is(err, errNoMessage):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, translate("read lease", err)
	case Removed(m.Header):
		return Record{}, false, nil
	}
	rec, err := s.decode(name, m)
	if err != nil || !cond(rec) {
		return rec, false, err
	}
	switch _, err := s.purge(ctx, name, op, rec, reason, rec.Revision); {
	case errors.Is(err, errMismatch):
		return rec, false, nil // changed meanwhile
	case err != nil:
		return rec, false, err
	}
	return rec, true, nil
}

func (s *Store) decode(name string, m *jetstream.RawStreamMsg) (Record, error) {
	return decodeRecord(name, m.Sequence, m.Time, parseTTL(m.Header.Get(jetstream.MsgTTLHeader)), m.Data)
}

// Removed reports whether a message of a JetStream KV bucket's stream,
// with headers h, removes its key: a delete or purge tombstone, or a
// server marker (TTL lapse, stream purge or removal). In the lease bucket
// that ends a tenure.
func Removed(h nats.Header) bool {
	if h == nil {
		return false
	}
	return h.Get(hdrKVOp) != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// parseTTL reads a Nats-TTL header: a Go duration or a number of seconds.
// Anything else, a negative TTL and one beyond time.Duration's range among
// them (no server writes these), is 0: no TTL known.
func parseTTL(v string) time.Duration {
	if v == "" {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil {
		return max(d, 0)
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n <= int64(math.MaxInt64/time.Second) {
		return time.Duration(n) * time.Second
	}
	return 0
}

// publish writes one message to the lease's subject, expecting expect to be
// the subject's last revision (0: no message), with a TTL if ttl > 0:
// through the group commit if batching is on, else as one publish.
func (s *Store) publish(ctx context.Context, name, op string, data []byte, hdr nats.Header, expect uint64, ttl time.Duration) (uint64, error) {
	return s.write(s.newWrite(ctx, name, op, data, hdr, expect, ttl))
}

// newWrite is the write publish sends.
func (s *Store) newWrite(ctx context.Context, name, op string, data []byte, hdr nats.Header, expect uint64, ttl time.Duration) *writeReq {
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(hdrOp, op)
	return &writeReq{ctx: ctx, name: name, op: op, msg: &nats.Msg{Subject: s.prefix + name, Header: hdr, Data: data},
		expect: expect, ttl: ttl, done: make(chan writeResult, 1)}
}

// write sends req, through the group commit if the Store has one. A
// message the server would refuse for its size is refused here, before it
// can share a batch (whose other messages it would sink).
func (s *Store) write(req *writeReq) (uint64, error) {
	if size, limit := msgSize(req.msg), s.nc.MaxPayload(); limit > 0 && int64(size) > limit {
		return 0, fmt.Errorf("%w: %s of %q: its message takes about %d bytes, over the NATS server's max_payload of %d "+
			"(smaller attributes, or a larger max_payload)", ErrTooLarge, req.op, req.name, size, limit)
	}
	var rev uint64
	var err error
	if s.w == nil {
		s.metrics.StoreWrite(req.ctx, false, 1)
		rev, err = s.publishOne(req)
	} else {
		rev, err = s.w.submit(req)
	}
	if s.wroteHook != nil && (err == nil || errors.Is(err, ErrStoreFull)) {
		s.wroteHook(err)
	}
	// Noted by when the answer came (req.answered, taken where it came),
	// not in the order writers note them: a refusal answered before an
	// acceptance, its writer noting it after (a goroutine scheduled late),
	// kept /healthz at 503 for a minute on a node whose writes were
	// accepted since (found in review). The time the writer woke was no
	// better: a writer woken late took a late time.
	// (Read only of an answer this goroutine has: one given up on, its
	// context ended, may be answered yet.)
	switch {
	case err == nil:
		storeLater(&s.lastAccepted, cmp.Or(req.answered, monoSince()))
	case errors.Is(err, ErrStoreFull):
		storeLater(&s.lastFull, cmp.Or(req.answered, monoSince()))
	}
	return rev, err
}

// monoBase is monoSince's origin.
var monoBase = time.Now()

// monoSince is the time on the monotonic clock, in nanoseconds since
// monoBase: above 0.
func monoSince() int64 { return int64(time.Since(monoBase)) + 1 }

// storeLater sets v to at unless it holds a later time.
func storeLater(v *atomic.Int64, at int64) {
	for cur := v.Load(); cur < at && !v.CompareAndSwap(cur, at); cur = v.Load() {
	}
}

// StorageFull returns when a write of the Store was last refused for the
// NATS server's storage limit ([ErrStoreFull]), if no write was accepted
// since (by when their answers came); the zero time otherwise. A write refused for its
// expectation (another's tenure) or unanswered says nothing either way.
func (s *Store) StorageFull() time.Time {
	if full := s.lastFull.Load(); full != 0 && full > s.lastAccepted.Load() {
		return monoBase.Add(time.Duration(full - 1)) // with its monotonic reading
	}
	return time.Time{}
}

// msgSize bounds the size nats.go gives a write's message as it checks
// it against the server's max_payload: its data and headers as encoded,
// with the headers the write adds (expectation, TTL, batch) at their
// longest.
func msgSize(m *nats.Msg) int {
	n := len(m.Data) + len("NATS/1.0\r\n\r\n") + addedHeaderBytes
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// addedHeaderBytes bounds the headers a write's message gets as it goes
// out: Nats-Expected-Last-Subject-Sequence (20 digits), Nats-TTL (a
// duration's longest text) and the three atomic batch headers.
const addedHeaderBytes = 256

// purge writes a tombstone that rolls up the subject, if rev is current,
// ending the tenure cur.
func (s *Store) purge(ctx context.Context, name, op string, cur Record, reason string, rev uint64) (uint64, error) {
	return s.purgeHolding(ctx, name, op, cur, reason, rev, 0)
}

// purgeHolding is purge with a hold (hdrHold): no grant replaces the
// tombstone until hold has passed since it was stored. The tombstone
// lasts the marker TTL, or the hold if that is longer.
func (s *Store) purgeHolding(ctx context.Context, name, op string, cur Record, reason string, rev uint64, hold time.Duration) (uint64, error) {
	hdr := nats.Header{}
	hdr.Set(hdrKVOp, kvOpPurge)
	hdr.Set(jetstream.MsgRollup, rollupSubj)
	setEnd(hdr, cur, reason)
	if op == opExpire {
		hdr.Set(hdrExpired, cur.ExpiresAt().UTC().Format(time.RFC3339Nano))
	}
	ttl := s.o.markerTTL
	if hold > 0 {
		hdr.Set(hdrHold, strconv.FormatInt(hold.Milliseconds(), 10))
		ttl = max(ttl, hold)
	}
	sent := time.Now()
	seq, err := s.publish(ctx, name, op, nil, hdr, rev, ttl)
	if err == nil {
		// Stored after sent: a hold counted from then ends no earlier
		// than the server's.
		s.cache.set(name, cacheEntry{rec: Record{Revision: seq}, gone: true, sure: sureUntil(sent, ttl),
			ended: tombstoneOf(seq, time.Now(), hdr)})
	}
	return seq, err
}

// heldBack reports whether t, the end a grant would replace, is a
// revocation whose hold has not passed, and about how long it has left. A
// hold passes when it has by this machine's clock and by the server's
// (as [Store.Expired] decides), so a step of either clock alone frees no
// lease early; if the server's time cannot be read, it has not.
func (s *Store) heldBack(ctx context.Context, t *tombstone) (time.Duration, bool) {
	if t == nil || t.get(hdrOp) != "revoke" {
		return 0, false
	}
	hold := time.Duration(parseUint(t.get(hdrHold))) * time.Millisecond
	if hold <= 0 {
		return 0, false // revoked with FreeNow, or by an older leased
	}
	const again = 100 * time.Millisecond // past here, not yet at the server
	if left := time.Until(t.at.Add(hold)); left > 0 {
		return left, true
	}
	if len(s.Expired(ctx, slices.Values([]Record{{StoredAt: t.at, TTL: hold}}), 0)) == 1 {
		return 0, false
	}
	return again, true
}

// errMismatch is a failed compare-and-set, before it is explained.
var errMismatch = errors.New("kvlease: revision mismatch")

// mismatchError is errMismatch with the subject's last revision as the
// refusing server gave it ("wrong last sequence: N"): a floor for the read
// that explains the refusal. A read below it is stale (a deposed stream
// leader answering from its frozen state), not the lease's state.
type mismatchError struct{ last uint64 }

func (e *mismatchError) Error() string {
	return fmt.Sprintf("%v: the lease's last revision is %d", errMismatch, e.last)
}

func (e *mismatchError) Is(target error) bool { return target == errMismatch }

// mismatchFloor returns the last revision a refused compare-and-set
// named (0: none).
func mismatchFloor(err error) uint64 {
	var m *mismatchError
	if errors.As(err, &m) {
		return m.last
	}
	return 0
}

// wrongLastPrefix is how nats-server's JSStreamWrongLastSequenceErrF
// ("wrong last sequence: {seq}") begins.
const wrongLastPrefix = "wrong last sequence: "

// errDuplicate is a publish the stream dropped as a duplicate of the
// message with the same Nats-Msg-Id, whose revision comes with it.
var errDuplicate = errors.New("kvlease: duplicate message id")

// errCodeDuplicateInProcess: a replicated stream's leader has proposed a
// message with this one's Nats-Msg-Id and not applied it yet (nats-server
// checkMsgHeadersPreClusteredProposal). A grant retried while its first
// attempt is still on its way through raft gets it; so does one whose
// earlier attempt the leader proposed and lost, until the duplicate window
// ends. Either way that attempt may yet be stored: no refusal.
const errCodeDuplicateInProcess = 10158

// errCodeReplicasNotSupported: a server that is not in a cluster refuses a
// stream of more than one replica (with a 500, which would otherwise read
// as "try again"). It will not change its mind.
const errCodeReplicasNotSupported = 10074

// errCodeNoPeers: a cluster found no servers to place a stream's replicas
// on ("no suitable peers for placement", with the reasons).
const errCodeNoPeers = 10005

// errCodeInsufficientResources (a 503) and errCodeStorageExceeded:
// JetStream is at a storage limit of the server's;
// errCodeAccountResourcesExceeded (a 400): a publish past the account's
// (nats-server's wouldExceedLimits: its only use).
const (
	errCodeInsufficientResources    = 10023
	errCodeStorageExceeded          = 10047
	errCodeAccountResourcesExceeded = 10002
)

// noPeersOffline is errCodeNoPeers's description when a peer being
// offline is its only reason (nats-server v2.15.2's selectPeerError), and
// noPeers when it gives none: fewer servers known than the replicas.
const (
	noPeersOffline = "no suitable peers for placement, peer offline"
	noPeers        = "no suitable peers for placement"
)

// noPeersPatience is how long [Open] takes a placement refused for too
// few servers, with no other reason, for a cluster still forming, before
// it returns the refusal (ErrBucket).
var noPeersPatience = 15 * time.Second

// tooFewPeers returns the refusal in err if it is a placement refused for
// too few servers, with no other reason.
func tooFewPeers(err error) (*jetstream.APIError, bool) {
	var apiErr *jetstream.APIError
	ok := errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers && apiErr.Description == noPeers
	return apiErr, ok
}

// translate maps NATS errors to kvlease's: compare-and-set conflicts to
// errMismatch, everything that means "no answer" to ErrUnavailable.
func translate(op string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && err.Error() == "nats: "+apiErr.Error() {
		// jetstream's publish puts a second "nats: " before its refusal's
		// own ("nats: nats: API error"); nothing else is lost with it.
		err = apiErr
	}
	switch {
	case errors.Is(err, ErrPermission):
		return fmt.Errorf("%s: %w", op, err) // a refusal, which waiting does not change
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		// Only a single publish's refusal reaches here (a refused batch's
		// names some message of the batch, and is written again).
		if n, ok := strings.CutPrefix(apiErr.Description, wrongLastPrefix); ok {
			if last, perr := strconv.ParseUint(n, 10, 64); perr == nil {
				return &mismatchError{last: last}
			}
		}
		return errMismatch
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return errMismatch
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDuplicateInProcess:
		// Proposed, not committed: on a replicated bucket, most often a
		// stream leader that has lost its quorum and keeps leading until
		// it notices (a newcomer with two of three nodes down read only
		// "duplicate message id is in process"; found by an outside client).
		return fmt.Errorf("%w: %s: an earlier attempt of this request is still in process at the bucket's stream leader, not committed "+
			"(a leader without a quorum of its peers, if the bucket is replicated: see leased status): %w", ErrUnavailable, op, err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported:
		return fmt.Errorf("%w: %s: the NATS server is not in a cluster, so a bucket has one replica (WithReplicas(1); serve --replicas 1): %w", ErrBucket, op, err)
	case errors.Is(err, nats.ErrMaxPayload):
		// Refused by the client before it was sent: too large, every time.
		return fmt.Errorf("%w: %s: %w", ErrTooLarge, op, err)
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		// ConnOptions buffers nothing while reconnecting: nats.go's
		// "outbound buffer limit exceeded" means not sent, as NotConnected
		// says (a newcomer did not recognise it: found by an outside client).
		return fmt.Errorf("%w: %w: %s: not connected to NATS (reconnecting): %w", ErrUnavailable, ErrNotSent, op, err)
	case errors.Is(err, nats.ErrConnectionClosed):
		// Closed before or while it went: it never comes back, so a read
		// or write retried on it waits in vain (found in review: an
		// Acquire whose Store read the lease first, and a Campaign's
		// watch, retried until their context ended).
		return fmt.Errorf("%w: %w: %s: %w", ErrUnavailable, ErrConnClosed, op, err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers && apiErr.Description == noPeersOffline:
		// A 400, but a node the placement needs is down or not yet back,
		// as while a cluster starts: try again (a node exited for good
		// when its history stream met it, in a CI run of the cluster
		// tests). With another reason beside it (tags, storage), it stays
		// a refusal: that would not pass.
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers:
		// Said in words: a two-node cluster's serve exited with only
		// "no suitable peers for placement" (found by an outside client).
		return fmt.Errorf("%w: %s refused: %w (the cluster has fewer JetStream servers than the replicas asked for, "+
			"or too few with room or matching tags: start them all, or ask for fewer replicas)", ErrBucket, op, err)
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeInsufficientResources || apiErr.ErrorCode == errCodeStorageExceeded ||
		apiErr.ErrorCode == errCodeAccountResourcesExceeded):
		// Said as what it is: "insufficient resources" alone left users
		// guessing, every renewal failing with it (found filling a
		// server's max_file_store). The account's limit is a 400, which
		// made it a refusal (ErrBucket): a keeper gave its lease up at
		// the first renewal refused (found in review).
		return fmt.Errorf("%w: %w: %s: %w", ErrUnavailable, ErrStoreFull, op, err)
	case errors.As(err, &apiErr) && apiErr.Code >= 500:
		// Cluster unavailable, no quorum, store failure: try again.
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	case errors.As(err, &apiErr) && strings.Contains(strings.ToLower(apiErr.Description), "ttl"):
		return fmt.Errorf("%w: %s: %w", ErrBucket, op, err)
	case errors.As(err, &apiErr):
		return fmt.Errorf("%w: %s refused: %w", ErrBucket, op, err)
	default:
		// No answer, or an answer we cannot read: the operation may or may
		// not have happened. Unavailable, never a refusal, so that a keeper
		// retries instead of giving up a lease it may still hold.
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
}

// revCache remembers, per lease, the last revision this Store wrote or saw:
// the record of a live revision (revisions are immutable, so a renewal that
// names it can be verified without a read), or the revision of the tombstone
// a new grant must name. Bounded; eviction only costs a read.
//
// It holds what the bucket may still hold: an entry is forgotten once its
// message can no longer be the subject's last (see cacheEntry.until), swept
// at most once per revCacheSweep by the writes that come, so that its memory
// follows the leases live and recently ended, not every name the Store has
// ever touched (a worker claiming the items of a long queue).
type revCache struct {
	mu sync.Mutex
	m  map[string]cacheEntry
	// keep is how long the bucket keeps an expiry marker or a tombstone
	// (the longer of the Store's and the bucket's marker TTL); 0: entries
	// are not swept.
	keep      time.Duration
	nextSweep time.Time
}

type cacheEntry struct {
	rec   Record // zero Holder: a tombstone at rec.Revision
	gone  bool
	ended *tombstone // if gone and known: the tombstone, for the next grant to carry
	// sure: until then the subject certainly has a message at rec.Revision
	// or later (zero: not known). It is set for the store's own writes, from
	// the time before the write was sent plus its TTL: the server's clock
	// for the entry starts later, and the subject keeps a marker after the
	// entry expires.
	sure time.Time
	// renewal is the value this Store wrote at rec.Revision if that was a
	// renewal: the next renewal of the tenure for the same duration
	// stores the same bytes again, so it need not encode them.
	renewal []byte
	// until is when the message at rec.Revision is surely no longer the
	// subject's last, counted from when the entry was set: a record's TTL
	// and then its expiry marker's, or the tombstone's (its hold, if
	// longer). The sweep forgets the entry after it.
	until time.Time
}

// revCacheSweep is how often the cache looks for entries past their until:
// a pass over every entry under the lock (30 ms at revCacheMax on a busy
// 2-core machine, while renewals through the Store wait), amortised over the
// writes of that time.
const revCacheSweep = time.Minute

// lifetime is how long from now the bucket may keep e's message as the
// subject's last (see cacheEntry.until).
func (c *revCache) lifetime(e cacheEntry) time.Duration {
	if !e.gone {
		return e.rec.TTL + c.keep
	}
	d := c.keep
	if e.ended != nil {
		d = max(d, time.Duration(parseUint(e.ended.get(hdrHold)))*time.Millisecond)
	}
	return d
}

// sweepLocked forgets the entries past their until, once per revCacheSweep.
func (c *revCache) sweepLocked(now time.Time) {
	if c.keep <= 0 || now.Before(c.nextSweep) {
		return
	}
	for name, e := range c.m {
		if now.After(e.until) {
			delete(c.m, name)
		}
	}
	c.nextSweep = now.Add(revCacheSweep)
}

// sureUntil is the end of an entry's sure time: sent + ttl less a margin
// for the rates of the two clocks (ρ, [DefaultClockRate], the bound the
// holders assume). It was 1%, which for a lease of more than about 100 s
// ended it before its holder's own deadline (a 1 h lease's renewals were
// refused as too late from 30 s before that deadline): see
// [RenewalCutoff].
func sureUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - rateMargin(ttl))
}

// rateMargin is what an interval of length ttl, counted on one clock, may
// be shorter on another: ρ·ttl.
func rateMargin(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * DefaultClockRate)
}

// revCacheMax bounds the cache: 262,144 leases, about 130 MiB at most (an
// entry is a few hundred bytes, and the value of a renewed tenure's last
// renewal about 250 more). It must exceed the live leases one Store
// renews, or a renewal of an evicted lease costs a read of its revision
// (a JetStream message get and a JSON decode, about as much CPU as the
// renewal itself): at 1<<16, a grantor renewing 100,000 live leases missed
// on a third of its renewals. One node renews about 100k (README,
// Performance).
const revCacheMax = 1 << 18

func (c *revCache) set(name string, e cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.sweepLocked(now)
	e.until = now.Add(c.lifetime(e))
	if old, ok := c.m[name]; ok && old.rec.Revision > e.rec.Revision {
		return // revisions of a lease only grow: e is from a stale read
	}
	if _, ok := c.m[name]; !ok && len(c.m) >= revCacheMax {
		for k := range c.m { // evict one at random
			delete(c.m, k)
			break
		}
	}
	c.m[name] = e
}

func (c *revCache) put(rec Record) { c.putSure(rec, time.Time{}, nil) }

// putSure remembers rec as written by this Store: surely there until sure,
// with the value renewal if it was a renewal.
func (c *revCache) putSure(rec Record, sure time.Time, renewal []byte) {
	rec.Secret = "" // the hash is enough; keep no secrets in memory
	c.set(rec.Name, cacheEntry{rec: rec, sure: sure, renewal: renewal})
}

// renewal returns the value this Store wrote renewing name to revision
// rev for duration d, if it is the revision remembered (else nil).
func (c *revCache) renewal(name string, rev uint64, d time.Duration) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[name]; ok && !e.gone && e.rec.Revision == rev && e.rec.Duration == d {
		return e.renewal
	}
	return nil
}

// unsure forgets that name's subject surely has a message: a read found
// it empty.
func (c *revCache) unsure(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[name]; ok {
		e.sure = time.Time{}
		c.m[name] = e
	}
}

// stale reports whether a write to name expecting revision expect is
// certain to fail its compare-and-set, by what the store knows: revisions
// of a subject only grow, so a nonzero expect below a revision written or
// seen is stale (an empty subject has last revision 0, never expect); and
// "no message" (expect 0) is stale while an entry of ours is surely there.
// The group commit answers such writes at once rather than let them reject
// a batch of others.
func (c *revCache) stale(name string, expect uint64, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	switch {
	case !ok:
		return false
	case expect != 0:
		return expect < e.rec.Revision
	default:
		return now.Before(e.sure)
	}
}
func (c *revCache) markGone(name string, t *tombstone) {
	c.set(name, cacheEntry{rec: Record{Revision: t.rev}, gone: true, ended: t})
}

// renewGuard is how close to its expiry a revision can no longer be
// renewed: a renewal that lands as the server's expiry timer fires is
// rolled up by the marker, and the grantor's clock may differ a little
// from the stream leader's. After the expiry (the server writes its
// marker up to ~250 ms late) it is refused as well. A holder keeping its
// deadline renews at least m_h + m_g before expiry (1.1 s by default).
func renewGuard(ttl time.Duration) time.Duration { return min(100*time.Millisecond, ttl/4) }

// expiresBy is the earliest time rec's revision may expire: from the
// store's own write, the time before it was sent plus its TTL (the entry
// is sure until then); from a read, the server's store time plus its TTL.
func (c *revCache) expiresBy(rec Record) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[rec.Name]; ok && !e.gone && e.rec.Revision == rec.Revision && !e.sure.IsZero() {
		return e.sure
	}
	return rec.StoredAt.Add(rec.TTL)
}

func (c *revCache) get(name string, rev uint64) (Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	if !ok || e.gone || e.rec.Revision != rev {
		return Record{}, false
	}
	return e.rec, true
}

// revision returns the last revision of name this Store wrote or saw (0 if
// none is remembered): a read of name showing less is stale.
func (c *revCache) revision(name string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name].rec.Revision
}

// lastGone returns the tombstone revision a grant should expect, if known
// (else 0), and the tombstone itself if known.
func (c *revCache) lastGone(name string) (uint64, *tombstone) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	if !ok || !e.gone {
		return 0, nil
	}
	return e.rec.Revision, e.ended
}
