// Package history keeps who held which lease when: one record per begin
// and per end of a tenure, in a JetStream stream beside the lease bucket,
// replicated like it and kept for a bounded time (24 h by default). The
// grantor node that observes the bucket (one per cluster, package grantor)
// writes it; `leased history` and the timeline page read it, and so can
// standard tools:
//
//	nats stream view LEASED_HISTORY_leases
//	nats sub --stream LEASED_HISTORY_leases 'leased.history.leases.>'
//
// # Records and tenures
//
// A [Record] is a begin ("granted") or an end ("ended", with its cause:
// released, revoked, expired, removed by gossip) of one tenure, identified
// by lease name and token. [Fold] turns records into [Tenure] rows. Each
// record carries the bucket revision of the change it reports; the stream's
// message IDs (derived from the tenure and the kind of change) make a second
// append of the same change within the stream's duplicate window a no-op,
// which is how a new observer taking over from one that died (or paused)
// records each change once.
//
// What it does not keep: renewals one by one (a tenure's end record counts
// those its observer saw), and the holder of a tenure that began and
// lapsed by TTL entirely while no observer was running (its end is kept,
// without a holder).
package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/atomicbatch"
	"github.com/leased/leased/kvlease/follow"
)

// DefaultRetention is how long records are kept.
const DefaultRetention = 24 * time.Hour

// MinMaxBytes is the smallest bound of the history's size: a record is
// about 300 bytes, so a few thousand tenures.
const MinMaxBytes = 1 << 20

// MinRetention is the shortest retention: JetStream refuses a stream that
// keeps messages for less than its duplicates window, which must cover an
// observer's takeover (see Open).
const MinRetention = time.Minute

// duplicates is the history stream's duplicates window: an observer that
// takes over appends again what its predecessor may have appended.
const duplicates = time.Minute

// Kinds of record.
const (
	KindGranted = "granted"
	KindEnded   = "ended"
	// KindFreed: the lease that a tenure's revocation held (no grant
	// allowed, see Record.HoldMS) was freed before the hold ran out, by
	// the revoked holder's release or a revocation with free_now. It ends
	// no tenure (the revocation did, in an earlier record); it names the
	// revoked one.
	KindFreed = "freed"
)

// End causes (Record.EndedBy, Tenure.EndedBy).
const (
	EndReleased = "released"
	EndRevoked  = "revoked"
	EndExpired  = "expired"
	// EndRemoved: revoked by the registry because gossip declared the
	// instance's node dead.
	EndRemoved = "removed"
	// EndUnknown: an end no observer saw. The observer records one when
	// its watch lagged past a tenure's end; [Fold] gives one to a tenure
	// without an end record that a later tenure of the lease followed (an
	// end lost while observers took over, or a record the server removed
	// with no marker), ended at the later tenure's begin at the latest;
	// and [Stream.EndLive] records one for each tenure of a bucket that
	// was deleted ([BucketGoneReason]).
	EndUnknown = "unknown"
)

// GossipReasonPrefix begins the revocation reason of a registration removed
// by gossip (package grantor/registry writes it); such an end is
// [EndRemoved].
const GossipReasonPrefix = "gossip: "

// Record is one begin or end of a tenure, as the stream keeps it.
type Record struct {
	Kind  string `json:"kind"` // KindGranted, KindEnded or KindFreed
	Name  string `json:"name"`
	Token uint64 `json:"token,omitempty"` // 0: an end whose tenure no observer saw
	// Holder of the tenure ("" if unknown).
	Holder string `json:"holder,omitempty"`
	// Revision is the bucket revision of the change (the grant, or for a
	// tenure first seen through a renewal, that renewal; the end).
	Revision uint64 `json:"revision"`
	// Time is the server's time of the change.
	Time time.Time `json:"time"`
	// GrantedAt is the tenure's grant time (on ends too, where known).
	GrantedAt time.Time `json:"granted_at,omitzero"`
	// DurationMS is the tenure's D, in milliseconds.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// EndedBy and Reason: on ends.
	EndedBy string `json:"ended_by,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// HoldMS, on a revocation's end, is how long from Time it held the
	// lease, no grant allowed (until the revoked holder's deadline had
	// surely passed; kvlease.Store.Revoke), unless a KindFreed record says
	// it was freed sooner; 0 for one that freed it at once.
	HoldMS int64 `json:"hold_ms,omitempty"`
	// Renewals the observer that recorded the end saw (a lower bound if
	// the observer changed during the tenure).
	Renewals int `json:"renewals,omitempty"`
	// Flapping: on begins, the lease was granted anew more often than the
	// observer's threshold allows.
	Flapping bool `json:"flapping,omitempty"`
	// TraceID of the grant's span (hex), for a link to the trace.
	TraceID string `json:"trace_id,omitempty"`
	// Observer names the grantor node that wrote the record.
	Observer string `json:"observer,omitempty"`
}

// msgID identifies the change a record reports: the same change appended
// twice (by two observers) has the same ID, and the stream keeps it once.
// A tenure begins once and ends once, so both are named by its token; an
// end whose tenure is unknown (token 0), by the revision that ended it
// (one change may end two tenures: the open one, whose end the watch
// missed, and the later one it names).
func (r Record) msgID() string {
	switch {
	case r.Kind == KindGranted:
		return "g:" + r.Name + ":" + strconv.FormatUint(r.Token, 10)
	case r.Kind == KindFreed:
		return "f:" + r.Name + ":" + strconv.FormatUint(r.Token, 10)
	case r.Token != 0:
		return "e:" + r.Name + ":" + strconv.FormatUint(r.Token, 10)
	}
	return "e:" + r.Name + ":r" + strconv.FormatUint(r.Revision, 10)
}

// Ends reports whether r says its tenure had ended: an end, or a free of
// the hold of a revocation that ended it.
func (r Record) Ends() bool { return r.Kind == KindEnded || r.Kind == KindFreed }

// Stream is a bucket's history stream.
type Stream struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	bucket  string
	prefix  string // "leased.history.<bucket>."
	singles bool   // Options.Singles
	// shortened is the retention the stream had if Open shortened it
	// (Retention); zero otherwise.
	shortened time.Duration
}

// Shortened returns the retention the stream had before Open (with
// Create) shortened it, which deleted the records older than the new
// one; zero if it did not. A grantor logs it: an operator's restart with
// a shorter --history-retention deleted history without a word (found
// by an outside client).
func (h *Stream) Shortened() time.Duration { return h.shortened }

// Replicas is the stream's replica count as Open found it.
func (h *Stream) Replicas() int { return h.stream.CachedInfo().Config.Replicas }

// StreamName is the name of bucket's history stream.
func StreamName(bucket string) string { return "LEASED_HISTORY_" + bucket }

// Subject is the subject of name's records in bucket's history.
func Subject(bucket, name string) string { return "leased.history." + bucket + "." + name }

// Options of [Open]: zero values take the defaults.
type Options struct {
	// Retention is how long records are kept. 0: the stream's, if it
	// exists, or DefaultRetention for a new one, so that a grantor
	// started without one does not cut what the others keep.
	Retention time.Duration
	// MaxBytes bounds the stream's size: past it the oldest records are
	// dropped. 0: the stream's bound, if it exists (an operator's `nats
	// stream edit --max-bytes`), or none; -1: none. Under [MinMaxBytes] is
	// an error. The history shares the NATS server's storage with the
	// lease bucket, whose every write a full storage refuses: a bound
	// keeps a churn of leases from filling it with history.
	MaxBytes int64
	Replicas int // 0: 1
	// Create, if set, creates the stream if missing (or updates its
	// retention and replicas, only if they differ: a user that may not
	// update streams can open one as it is); otherwise Open only opens it.
	Create bool
	// Singles makes AppendAll append one record per publish, never an
	// atomic batch: for a server that acknowledges before it syncs, where
	// a batch (staged in a synced store of its own on R1) costs more than
	// the publishes it replaces.
	Singles bool
}

// Open opens (with Create, creates or updates) bucket's history stream.
//
// Errors: [kvlease.ErrInvalidOption] (nothing sent); [kvlease.ErrNotFound]
// for a missing stream without Create; [kvlease.ErrPermission] for an
// update of the stream that the NATS user may not send (at once: the
// server answers it with nothing); [kvlease.ErrUnavailable].
func Open(ctx context.Context, js jetstream.JetStream, bucket string, o Options) (*Stream, error) {
	if o.Retention < 0 || o.Retention > 0 && o.Retention < MinRetention {
		return nil, fmt.Errorf("%w: history retention %v, want at least %v", kvlease.ErrInvalidOption, o.Retention, MinRetention)
	}
	if o.MaxBytes < -1 || o.MaxBytes > 0 && o.MaxBytes < MinMaxBytes {
		return nil, fmt.Errorf("%w: history max bytes %d, want -1 (none) or at least %d", kvlease.ErrInvalidOption, o.MaxBytes, MinMaxBytes)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return nil, fmt.Errorf("%w: history replicas %d outside 1..5", kvlease.ErrInvalidOption, o.Replicas)
	}
	h := &Stream{js: js, bucket: bucket, prefix: Subject(bucket, ""), singles: o.Singles}
	var err error
	if o.Create {
		old, oerr := js.Stream(ctx, StreamName(bucket))
		switch {
		case oerr == nil:
			was := old.CachedInfo().Config.MaxAge
			if o.Retention == 0 {
				// A grantor restarted without --history-retention cut
				// the week its cluster kept to the default day (found
				// by an outside client); and a stream kept without an
				// age limit (0) too (found in review).
				o.Retention = was
			}
			if was > o.Retention && o.Retention > 0 {
				h.shortened = was
			}
		case errors.Is(oerr, jetstream.ErrStreamNotFound):
			o.Retention = cmp.Or(o.Retention, DefaultRetention)
		default:
			return nil, kvlease.JetStreamError("open history", oerr)
		}
		// An update changes only what Open sets, as kvlease.Open's do: it
		// sent this config whole, and a size bound an operator had given
		// the stream (MaxBytes, MaxMsgs: the only bound of the history by
		// size), its compression or placement were dropped without a word
		// at a restart with another retention (found by an outside client).
		var cfg jetstream.StreamConfig
		if oerr == nil {
			cfg = old.CachedInfo().Config
		}
		cfg.Name = StreamName(bucket)
		cfg.Description = "leased: history of the tenures of lease bucket " + bucket
		cfg.Subjects = []string{h.prefix + ">"}
		cfg.Storage = jetstream.FileStorage
		cfg.Replicas = o.Replicas
		cfg.MaxAge = o.Retention
		if o.MaxBytes != 0 {
			cfg.MaxBytes = o.MaxBytes
		}
		if cfg.MaxBytes == 0 {
			cfg.MaxBytes = -1 // a new stream's: none
		}
		cfg.Discard = jetstream.DiscardOld
		cfg.Duplicates = duplicates
		cfg.AllowAtomicPublish = true // the observer appends a backlog as one batch: one sync
		// Created if missing, updated only if it differs: a NATS user that
		// may create streams but not update them (whose update the server
		// answers with nothing) could not start serve, even on a stream as
		// it was to be (found with kvlease.Open's own update, s17a).
		switch {
		case oerr != nil:
			h.stream, err = js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // made meanwhile, by another grantor
				h.stream, err = kvlease.UpdateStream(ctx, js, cfg)
			}
		case sameStream(old.CachedInfo().Config, cfg):
			h.stream = old
		default:
			h.stream, err = kvlease.UpdateStream(ctx, js, cfg)
		}
	} else {
		h.stream, err = js.Stream(ctx, StreamName(bucket))
	}
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("%w: no history stream %s (a grantor of bucket %q creates it)", kvlease.ErrNotFound,
			StreamName(bucket), bucket)
	case err != nil:
		return nil, kvlease.JetStreamError("open history", err)
	}
	return h, nil
}

// sameStream reports whether have, an existing history stream's config,
// is already what want, the config Open would give it, sets.
func sameStream(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Storage == want.Storage && have.Replicas == want.Replicas && have.MaxAge == want.MaxAge && have.MaxBytes == want.MaxBytes &&
		have.Discard == want.Discard && have.Duplicates == want.Duplicates && have.AllowAtomicPublish == want.AllowAtomicPublish
}

// Append stores r unless the stream already has it (an earlier append of
// the same change, within two minutes): fresh is false then.
func (h *Stream) Append(ctx context.Context, r Record) (fresh bool, err error) {
	b, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("history: encode: %w", err)
	}
	ack, err := h.js.PublishMsg(ctx, &nats.Msg{Subject: h.prefix + r.Name, Data: b}, jetstream.WithMsgID(r.msgID()))
	if err != nil {
		return false, kvlease.JetStreamError("append history", err)
	}
	return !ack.Duplicate, nil
}

// minBatch is the fewest records AppendAll sends as one atomic batch: a
// batch costs about four syncs on R1 (it is staged in a file store of its
// own), a single append one; fewer go one by one.
const minBatch = 8

// AppendAll stores rs in order, each unless the stream already has it, and
// reports which were fresh, in order. Enough of them go as one atomic
// batch (unless Options.Singles), durable with one sync; if the server
// refuses it because one is a duplicate (appended before, by a
// predecessor) or allows no batches, each is appended on its own. After an error, fresh holds the records appended
// so far; of the rest nothing is known: append them again (the stream
// keeps each change once).
func (h *Stream) AppendAll(ctx context.Context, rs []Record) (fresh []bool, err error) {
	if len(rs) >= minBatch && !h.singles {
		msgs := make([]*nats.Msg, len(rs))
		for i, r := range rs {
			b, err := json.Marshal(r)
			if err != nil {
				return nil, fmt.Errorf("history: encode: %w", err)
			}
			msgs[i] = &nats.Msg{Subject: h.prefix + r.Name, Data: b, Header: nats.Header{jetstream.MsgIDHeader: []string{r.msgID()}}}
		}
		_, err := atomicbatch.Publish(ctx, h.js.Conn(), msgs)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			fresh = make([]bool, len(rs))
			for i := range fresh {
				fresh[i] = true
			}
			return fresh, nil
		case !errors.As(err, &apiErr):
			return nil, kvlease.JetStreamError("append history", err)
		}
		// Refused, nothing stored: one by one, each with its own answer.
	}
	for _, r := range rs {
		f, err := h.Append(ctx, r)
		if err != nil {
			return fresh, err
		}
		fresh = append(fresh, f)
	}
	return fresh, nil
}

// Last returns the record appended last (ok false if none): a new observer
// reports the changes after its Revision.
func (h *Stream) Last(ctx context.Context) (r Record, ok bool, err error) {
	info, err := h.stream.Info(ctx)
	if err != nil {
		return Record{}, false, kvlease.JetStreamError("history info", err)
	}
	if info.State.Msgs == 0 {
		return Record{}, false, nil
	}
	return h.get(ctx, func() (*jetstream.RawStreamMsg, error) { return h.stream.GetMsg(ctx, info.State.LastSeq) })
}

// BucketGoneReason is the reason of the ends [Stream.EndLive] records.
const BucketGoneReason = "the lease bucket was deleted and made anew: the tenure ended with the old bucket, " +
	"at the latest when leased found the new one"

// VanishedReason is the reason of the end an observer records, as it
// takes over, of a tenure the history shows held that the bucket no
// longer holds and keeps no trace of ([EndUnknown]).
const VanishedReason = "no observer saw this tenure end: the bucket kept no trace of it by the time one took over " +
	"(no grantor observed for longer than an end's marker is kept); ended at the latest when that observer found it gone"

// endLiveIdle bounds EndLive's read of the history: it fails once the
// stream has sent nothing for this long (see [Stream.ReadIdle]).
const endLiveIdle = 10 * time.Second

// EndLive records an end ([EndUnknown], [BucketGoneReason], at the time
// given, with the bucket revision given) for every tenure the history
// shows live whose token is at most upTo: the tenures of a lease bucket
// that was deleted, which nothing else will ever end (no marker comes from
// a bucket that is gone), so that the history and the timeline showed
// them held until their records aged out (found in review). It reads the
// whole history, so it is for the rare moment a bucket is found made anew,
// before anything of the new bucket is recorded; tenures of the new one,
// whose tokens are above upTo, are left alone. It returns how many it
// ended. An end recorded before (by another node doing the same) is kept
// once.
func (h *Stream) EndLive(ctx context.Context, upTo, revision uint64, at time.Time) (int, error) {
	recs, err := h.ReadIdle(ctx, "", time.Time{}, endLiveIdle)
	if err != nil {
		return 0, err
	}
	var ends []Record
	for _, t := range Fold(recs) {
		if !t.Live() || t.Token == 0 || t.Token > upTo {
			continue
		}
		ends = append(ends, Record{Kind: KindEnded, Name: t.Name, Token: t.Token, Holder: t.Holder,
			Revision: revision, Time: at, GrantedAt: t.From, DurationMS: t.DurationMS,
			EndedBy: EndUnknown, Reason: BucketGoneReason, Renewals: t.Renewals, TraceID: t.TraceID})
	}
	if _, err := h.AppendAll(ctx, ends); err != nil {
		return 0, err
	}
	return len(ends), nil
}

// LastFor returns the last record of lease name (ok false if none).
func (h *Stream) LastFor(ctx context.Context, name string) (r Record, ok bool, err error) {
	return h.get(ctx, func() (*jetstream.RawStreamMsg, error) { return h.stream.GetLastMsgForSubject(ctx, h.prefix+name) })
}

func (h *Stream) get(ctx context.Context, get func() (*jetstream.RawStreamMsg, error)) (Record, bool, error) {
	m, err := get()
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, kvlease.JetStreamError("read history", err)
	}
	var r Record
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return Record{}, false, fmt.Errorf("%w: history message %d: %v", kvlease.ErrBucket, m.Sequence, err)
	}
	return r, true, nil
}

// Read returns the records of leases whose names start with prefix ("" for
// all) stored since the time given, in the order they were stored.
func (h *Stream) Read(ctx context.Context, prefix string, since time.Time) ([]Record, error) {
	var out []Record
	err := h.Follow(ctx, prefix, since, func(r Record, caughtUp bool) bool {
		if !caughtUp {
			out = append(out, r)
		}
		return !caughtUp
	})
	return out, err
}

// ReadIdle is [Stream.Read] bounded by idle instead of a deadline: it
// fails, wrapping [kvlease.ErrUnavailable], once the stream has sent no
// message for idle (setting the read up included), and reads a history
// however long, while it keeps coming. Read within a deadline, a long
// history (some hundred thousand records: a day of a few changes a
// second) failed, its server streaming it steadily (found by an outside
// client). Messages of leases not under prefix, which a prefix that is
// not whole dot-separated tokens reads too, count as coming.
func (h *Stream) ReadIdle(ctx context.Context, prefix string, since time.Time, idle time.Duration) ([]Record, error) {
	var out []Record
	if err := h.readEach(ctx, prefix, since, false, idle, func(r Record) { out = append(out, r) }); err != nil {
		return nil, err
	}
	return out, nil
}

// Held returns the tenures the history shows held: the begin record
// ([KindGranted]) of each lease whose last record is one, in order of
// revision, bounded by idle as [Stream.ReadIdle] is. It reads one message
// per lease, not the whole history, and keeps only those begins: what it
// holds is bounded by the leases held, not by the names the history has
// seen (the last records of 100,000 names, kept, were 90 MB; found in
// review).
func (h *Stream) Held(ctx context.Context, idle time.Duration) ([]Record, error) {
	held := map[string]Record{}
	err := h.readEach(ctx, "", time.Time{}, true, idle, func(r Record) {
		// A consumer made anew during the read goes on from where the
		// last delivered, message by message: a lease's later record
		// stands.
		if r.Kind == KindGranted {
			held[r.Name] = r
		} else {
			delete(held, r.Name)
		}
	})
	if err != nil {
		return nil, err
	}
	return slices.SortedFunc(maps.Values(held), func(a, b Record) int { return cmp.Compare(a.Revision, b.Revision) }), nil
}

// readEach is ReadIdle calling fn with each record instead of returning
// them, of each lease's last record alone if lastOnly.
func (h *Stream) readEach(ctx context.Context, prefix string, since time.Time, lastOnly bool, idle time.Duration, fn func(Record)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errIdle := fmt.Errorf("%w: read history: nothing received for %v", kvlease.ErrUnavailable, idle.Round(time.Millisecond))
	timer := time.AfterFunc(idle, func() { cancel(errIdle) })
	defer timer.Stop()
	err := h.follow(ctx, prefix, since, Position{}, lastOnly, func() { timer.Reset(idle) }, func(r Record, _ Position, caughtUp bool) bool {
		if !caughtUp {
			fn(r)
		}
		return !caughtUp
	})
	if err != nil && context.Cause(ctx) == errIdle {
		return errIdle
	}
	return err
}

// Follow calls fn with every record of leases whose names start with
// prefix stored since the time given, then with each new one as it is
// stored, until fn returns false or ctx ends. Once the stored records have
// been delivered it calls fn once with caughtUp set (and a zero record).
func (h *Stream) Follow(ctx context.Context, prefix string, since time.Time, fn func(r Record, caughtUp bool) bool) error {
	return h.follow(ctx, prefix, since, Position{}, false, nil, func(r Record, _ Position, caughtUp bool) bool { return fn(r, caughtUp) })
}

// Position is a record's place in the stream: its sequence and the
// (server's) time the stream stored it, which is not the record's Time
// (the change's: a record appended late, by an observer catching up or
// taking over, has an older one; one written by a node whose clock runs
// ahead of the stream's server, such as [Stream.EndLive]'s, a newer one).
type Position struct {
	Seq    uint64
	Stored time.Time
}

// FollowAfter is [Stream.Follow] resumed after the record at after (a
// Position fn was given): it delivers every record stored after that one
// and since the time given, none missed and none again, whatever their
// Times; after's zero value follows from since. fn is given each record's
// position (zero with caughtUp).
func (h *Stream) FollowAfter(ctx context.Context, prefix string, since time.Time, after Position,
	fn func(r Record, at Position, caughtUp bool) bool) error {
	return h.follow(ctx, prefix, since, after, false, nil, fn)
}

// follow is FollowAfter, calling received (if not nil) on each message;
// with lastOnly, it delivers the last record of each lease (since and
// after are not used) and is caught up at the newest.
func (h *Stream) follow(ctx context.Context, prefix string, since time.Time, after Position, lastOnly bool, received func(),
	fn func(r Record, at Position, caughtUp bool) bool) error {
	filter := filterFor(h.prefix, prefix)
	// Caught up once the newest record under the filter now is delivered
	// (the consumer's own "nothing pending" can come early, as the lease
	// watcher found).
	last, err := setup(ctx, func(ctx context.Context) (uint64, error) {
		switch m, err := h.stream.GetLastMsgForSubject(ctx, filter); {
		case err == nil:
			return m.Sequence, nil
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return 0, nil
		default:
			return 0, kvlease.JetStreamError("follow history: last record", err)
		}
	})
	if err != nil {
		return err
	}
	// Heartbeats as a lease watch has them: in a cluster a new consumer's
	// first pull now and then goes unanswered, and with nats.go's default
	// `leased history` waited out its whole timeout (3 in 300 calls on a
	// healthy three-node cluster, none with them; 7 took 1-2 s instead).
	cfg := follow.Config{Stream: StreamName(h.bucket), Filter: filter,
		Deliver: jetstream.DeliverByStartTimePolicy, StartTime: &since, Heartbeat: kvlease.WatchHeartbeat}
	switch {
	case lastOnly:
		cfg.Deliver, cfg.StartTime = jetstream.DeliverLastPerSubjectPolicy, nil
	case after.Seq > 0 && after.Seq <= last && !after.Stored.Before(since):
		// The stream stores in order of sequence, and so of stored time:
		// every record after this one was stored since. (A sequence
		// beyond the last record is of a stream since deleted and made
		// anew, whose sequences began again: followed from since.)
		cfg.Deliver, cfg.StartTime, cfg.StartSeq = jetstream.DeliverByStartSequencePolicy, nil, after.Seq+1
	}
	fl, err := setup(ctx, func(ctx context.Context) (kvlease.Follow, error) {
		return kvlease.StartFollow(ctx, "follow history", h.js, cfg)
	})
	if err != nil {
		return err
	}
	defer fl.Stop()
	stop := context.AfterFunc(ctx, fl.Stop)
	defer stop()
	caughtUp := last == 0 || fl.Info().NumPending == 0 // nothing since the start
	if caughtUp && !fn(Record{}, Position{}, true) {
		return nil
	}
	for {
		m, err := fl.Next()
		if err != nil {
			if ctx.Err() != nil {
				return kvlease.JetStreamError("follow history", ctx.Err())
			}
			return err
		}
		if received != nil {
			received()
		}
		md, mdErr := m.Metadata()
		var r Record
		if err := json.Unmarshal(m.Data(), &r); err == nil && strings.HasPrefix(r.Name, prefix) {
			var at Position
			if mdErr == nil {
				at = Position{Seq: md.Sequence.Stream, Stored: md.Timestamp}
			}
			if !fn(r, at, false) {
				return nil
			}
		}
		if mdErr == nil && !caughtUp && md.Sequence.Stream >= last {
			caughtUp = true
			if !fn(Record{}, Position{}, true) {
				return nil
			}
		}
	}
}

// setupAttempt bounds each request that sets up a follow. In a cluster a
// request to a stream that is electing its leader (its leader's node has
// died) goes unanswered; it must be asked again once the stream has a new
// leader, a few seconds later, not waited on for the caller's whole
// deadline (a timeline read waited 30 s and failed while the new leader
// had been serving for 25 s).
const setupAttempt = 5 * time.Second

// setup calls attempt, each call bounded by setupAttempt, until it
// succeeds, fails other than unavailable, or ctx ends.
func setup[T any](ctx context.Context, attempt func(ctx context.Context) (T, error)) (T, error) {
	return kvlease.RetryUnavailable(ctx, time.Second, nil, func() (T, error) {
		actx, cancel := context.WithTimeout(ctx, setupAttempt)
		defer cancel()
		return attempt(actx)
	})
}

// filterFor is the subject filter for names starting with prefix: on
// whole dot-separated tokens, the rest matched by the caller.
func filterFor(subjectPrefix, prefix string) string {
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		return subjectPrefix + prefix[:i+1] + ">"
	}
	return subjectPrefix + ">"
}

// ParseSince reads the start of a window of history: a duration ≥ 0
// back from now, or an RFC 3339 time. It returns the time and, for a
// duration, the duration. A start before 1970 is 1970, one after now is
// now (nothing is older, or newer), and so within the years 1678–2262 the
// history's reads count in nanoseconds (2300 read as all of it, 1600 as
// nothing; found by an outside client).
func ParseSince(s string, now time.Time) (time.Time, time.Duration, error) {
	epoch := time.Unix(0, 0)
	d, err := time.ParseDuration(s)
	switch {
	case err == nil && d < 0:
		return time.Time{}, 0, fmt.Errorf("since %q: negative (give how far back, e.g. 1h)", s)
	case err == nil:
		return laterOf(now.Add(-d), epoch), d, nil
	case durationLike.MatchString(s):
		return time.Time{}, 0, fmt.Errorf("since %q: too far back for a duration (at most about 290 years); give an RFC 3339 time", s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	switch {
	case err != nil:
		return time.Time{}, 0, fmt.Errorf("since %q: want a duration back from now (30m, 1h, 24h) or an RFC 3339 time", s)
	case t.After(now):
		return now, 0, nil // a window of the live leases only
	}
	return laterOf(t, epoch), 0, nil
}

// durationLike matches what ParseDuration reads, though it may overflow.
var durationLike = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$`)

func laterOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// Live returns a grant record of each of leases, the live leases as the
// bucket has them now, for [Fold] beside the records of a window ([Stream.Read]
// since a time): a tenure granted before the window and live through it
// has no record in the window, and without these it was missing from "who
// held this lease over the last hour" for the lease held longest. A tenure
// whose grant is among the records folds into the same row. The grantor's
// own leases (names beginning [api.ReservedPrefix]) are left out, as the
// history leaves them out.
func Live(leases []kvlease.Record) []Record {
	out := make([]Record, 0, len(leases))
	for _, l := range leases {
		if !strings.HasPrefix(l.Name, api.ReservedPrefix) {
			out = append(out, Granted(l))
		}
	}
	return out
}

// Granted is the record of the grant that began l's tenure, as far as l
// tells it (the observer that saw the grant adds who wrote it and whether
// the lease was flapping).
func Granted(l kvlease.Record) Record {
	return Record{Kind: KindGranted, Name: l.Name, Token: uint64(l.Token), Holder: l.Holder,
		Revision: uint64(l.Token), Time: l.GrantedAt, GrantedAt: l.GrantedAt, DurationMS: l.Duration.Milliseconds(),
		TraceID: TraceIDOf(l)}
}

// TraceIDOf is the trace ID (hex) of l's grant span, "" if it has none.
func TraceIDOf(l kvlease.Record) string {
	if sc := kvlease.SpanContextOfGrant(l); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// Tenure is one tenure of a lease, folded from its records.
type Tenure struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	// From is the grant time (zero if unknown: the tenure's begin is older
	// than the records read); To the end (zero while live).
	From       time.Time `json:"from,omitzero"`
	To         time.Time `json:"to,omitzero"`
	DurationMS int64     `json:"duration_ms,omitempty"`
	Renewals   int       `json:"renewals"`           // left out while live (counted at the end)
	EndedBy    string    `json:"ended_by,omitempty"` // "" while live
	Reason     string    `json:"reason,omitempty"`
	Flapping   bool      `json:"flapping,omitempty"`
	TraceID    string    `json:"trace_id,omitempty"`
	// HeldUntil, for a tenure whose revocation held the lease (no grant
	// allowed), is when that hold ended: when the hold ran out, was freed
	// (KindFreed), or the next tenure began, whichever came first. It may
	// be later than now.
	HeldUntil time.Time `json:"held_until,omitzero"`
	// HoldMS is the hold its revocation's record gave, from To, in
	// milliseconds (HeldUntil is earlier if the hold was freed or the next
	// tenure began sooner).
	HoldMS int64 `json:"hold_ms,omitempty"`
	// EndInferred says no record ended the tenure: its end (EndUnknown)
	// is the begin of the next tenure of its lease.
	EndInferred bool `json:"end_inferred,omitempty"`
}

// Live reports whether the tenure had not ended when read.
func (t Tenure) Live() bool { return t.EndedBy == "" }

// MarshalJSON leaves a live tenure's renewals out: they are counted when
// it ends (the text shows "-"). It said "renewals":0, read as none (found
// by an outside client).
func (t Tenure) MarshalJSON() ([]byte, error) {
	type plain Tenure
	if !t.Live() {
		return json.Marshal(plain(t))
	}
	return json.Marshal(struct {
		plain
		Renewals *int `json:"renewals,omitempty"` // shadows plain's
	}{plain: plain(t)})
}

// Held is how long the tenure lasted (until now, while live; 0 if its
// begin is unknown).
func (t Tenure) Held(now time.Time) time.Duration {
	switch {
	case t.From.IsZero():
		return 0
	case t.Live():
		return now.Sub(t.From)
	}
	return t.To.Sub(t.From)
}

// Fold turns records into tenures, ordered by lease name and then by
// begin (token). A record of a tenure already folded updates it, so
// records may repeat.
func Fold(records []Record) []Tenure {
	type key struct {
		name  string
		token uint64
	}
	var out []Tenure
	at := map[key]int{} // index in out
	for _, r := range records {
		i, ok := at[key{r.Name, r.Token}]
		if r.Kind == KindFreed {
			// Of a hold this fold has: a free whose tenure ended before
			// the records read is not a tenure of its own.
			if ok && !out[i].HeldUntil.IsZero() && r.Time.Before(out[i].HeldUntil) {
				out[i].HeldUntil = r.Time
			}
			continue
		}
		if !ok || r.Token == 0 { // a new tenure, or an end no observer saw begin: a row of its own
			i = len(out)
			out = append(out, Tenure{Name: r.Name, Token: r.Token})
			if r.Token != 0 {
				at[key{r.Name, r.Token}] = i
			}
		}
		t := &out[i]
		t.Holder = cmp.Or(t.Holder, r.Holder)
		t.TraceID = cmp.Or(t.TraceID, r.TraceID)
		if t.From.IsZero() {
			t.From = r.GrantedAt
		}
		t.DurationMS = cmp.Or(t.DurationMS, r.DurationMS)
		t.Flapping = t.Flapping || r.Flapping
		if r.Kind == KindEnded && t.Live() {
			// The first end stands: a tenure ends once. A second comes only
			// from a server that brought the tenure back after an unclean
			// restart (kvlease.OverdueGrace), whose end leased wrote again.
			t.To, t.EndedBy, t.Reason = r.Time, r.EndedBy, r.Reason
			if r.HoldMS > 0 {
				t.HeldUntil, t.HoldMS = r.Time.Add(time.Duration(r.HoldMS)*time.Millisecond), r.HoldMS
			}
		}
		if r.Kind == KindEnded {
			t.Renewals = max(t.Renewals, r.Renewals)
		}
	}
	slices.SortStableFunc(out, func(a, b Tenure) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), a.start().Compare(b.start()), cmp.Compare(a.Token, b.Token))
	})
	// A lease has one tenure at a time: one with no end record that a
	// later tenure (a higher token) followed had ended by that one's begin.
	byToken := make([]int, 0, len(out)) // indexes of tenures with tokens
	for i := range out {
		if out[i].Token != 0 {
			byToken = append(byToken, i)
		}
	}
	slices.SortFunc(byToken, func(a, b int) int {
		return cmp.Or(strings.Compare(out[a].Name, out[b].Name), cmp.Compare(out[a].Token, out[b].Token))
	})
	for k := 0; k+1 < len(byToken); k++ {
		t, n := &out[byToken[k]], &out[byToken[k+1]]
		if t.Name == n.Name && t.Live() {
			t.To, t.EndedBy, t.EndInferred = n.start(), EndUnknown, true
		}
		if t.Name == n.Name && !t.HeldUntil.IsZero() && n.start().Before(t.HeldUntil) {
			t.HeldUntil = n.start() // freed, though no record said so
		}
	}
	return out
}

// start orders tenures: their grant time, or their end if that is unknown.
func (t Tenure) start() time.Time {
	if t.From.IsZero() {
		return t.To
	}
	return t.From
}
