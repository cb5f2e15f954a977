package faultcheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Errors returned by this package. Each is wrapped with the details, so
// match with [errors.Is].
var (
	// ErrMalformed: a history line is not a record (bad JSON, an unknown
	// field), anywhere but at the end of a stream.
	ErrMalformed = errors.New("faultcheck: malformed record")
	// ErrInvalidRecord: a record parses but breaks the format's rules (a
	// missing field, a reply before its send, the same operation logged
	// twice).
	ErrInvalidRecord = errors.New("faultcheck: invalid record")
	// ErrInvalidParams: [Params] that [Params.Validate] refuses.
	ErrInvalidParams = errors.New("faultcheck: invalid params")
)

// RecordType tells an operation from a fault event.
type RecordType string

const (
	TypeOp    RecordType = "op"
	TypeFault RecordType = "fault"
)

// OpKind is the request an operation sent.
type OpKind string

const (
	OpGrant   OpKind = "grant"
	OpRenew   OpKind = "renew"
	OpRelease OpKind = "release"
	// OpGet is a read of the lease (lease.v1.get). Its reply is evidence
	// of what the cluster holds ([Params.IgnoreReads]).
	OpGet OpKind = "get"
)

// Outcome codes. Error replies carry the service's codes verbatim
// (grantor/api: "held", "not_holder", ...); the checker reads the ones
// named here and treats any other as a refusal that shows nothing.
const (
	// CodePending marks a record written just before the send. A later
	// record of the same Proc and Seq replaces it; one that is never
	// replaced (the process was killed) is an operation without a reply.
	CodePending = ""
	// CodeOK: the service granted, renewed or released, or the get found
	// the lease.
	CodeOK = "ok"
	// CodeNoReply: the caller gave up waiting (its timeout, a dropped
	// reply); TReply is when it gave up.
	CodeNoReply     = "no_reply"
	CodeHeld        = "held"
	CodeNotHolder   = "not_holder"
	CodeConflict    = "conflict"
	CodeExpired     = "expired"
	CodeNotFound    = "not_found"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
)

// FaultKind names what the nemesis did. The checker counts any kind; it
// reads KillHolder and StopHolder (with Target the holder's Proc) to tell
// why a tenure ended.
type FaultKind string

const (
	FaultKillNode   FaultKind = "kill_node"   // SIGKILL a node, restart it on its data
	FaultStopNode   FaultKind = "stop_node"   // SIGSTOP a node past the election, then SIGCONT
	FaultKillAll    FaultKind = "kill_all"    // SIGKILL every node, restart them
	FaultStopHolder FaultKind = "stop_holder" // SIGSTOP a holder process for 2–3·D
	FaultKillHolder FaultKind = "kill_holder" // SIGKILL a holder process (a new one starts)
	FaultPartition  FaultKind = "partition"   // cut the stream leader off
	FaultDropReply  FaultKind = "drop_reply"  // a proxy drops replies
)

// Request holds the fields an operation sent.
type Request struct {
	// D is the duration asked for, in nanoseconds (grant; a renew that
	// changes it). 0 on a renew keeps the tenure's.
	D int64 `json:"d_ns,omitempty"`
	// Token and Revision are those presented by renew and release.
	Token    uint64 `json:"token,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// RequestID is a grant's request id (kvlease.GrantRequest.RequestID):
	// the attempts of one grant request, sent again after no answer, share
	// it. Empty in histories from before idempotent grants, where every
	// attempt is a request of its own.
	RequestID string `json:"rid,omitempty"`
}

// Reply holds the fields a reply carried: the lease of a grant, renew or
// get; Holder and Token of a held error; Revision of a conflict.
type Reply struct {
	Holder     string    `json:"holder,omitempty"`
	Token      uint64    `json:"token,omitempty"`
	Revision   uint64    `json:"revision,omitempty"`
	ServerTime time.Time `json:"server_time,omitzero"`
	Node       string    `json:"node,omitempty"`
	// Recovered marks a successful grant answered with the tenure an
	// earlier attempt of the same request made (kvlease.Record.Recovered):
	// the holder counts its window from that request's first send.
	Recovered bool `json:"recovered,omitempty"`
}

// Record is one line of a history: an operation (Type "op") or a fault
// (Type "fault"). Times are CLOCK_MONOTONIC nanoseconds of the machine,
// which every process on it shares: TSend read just before the request
// is sent, TReply just after the reply (or the give-up) arrives.
//
//	{"type":"op","proc":"h1","seq":3,"holder":"h1","lease":"L1","op":"renew","t_send":5000000000,
//	 "t_reply":5002000000,"req":{"token":42,"revision":44},"code":"ok","reply":{"token":42,"revision":47}}
//	{"type":"op","proc":"h1","seq":5,"holder":"h1","lease":"L1","op":"grant","t_send":7000000000,
//	 "t_reply":7003000000,"req":{"d_ns":3000000000,"rid":"r7"},"code":"ok","reply":{"token":50,"revision":50,"recovered":true}}
//	{"type":"fault","fault":"kill_node","target":"n2","t_start":6000000000,"t_end":9000000000}
type Record struct {
	Type RecordType `json:"type"`

	// Proc is the process that sent the operation (a restarted holder is
	// a new Proc); Seq numbers its operations from 1.
	Proc   string `json:"proc,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	Holder string `json:"holder,omitempty"`
	Lease  string `json:"lease,omitempty"`
	Op     OpKind `json:"op,omitempty"`
	TSend  int64  `json:"t_send,omitempty"`
	// TReply is 0 while the record is pending.
	TReply int64   `json:"t_reply,omitempty"`
	Req    Request `json:"req,omitzero"`
	Code   string  `json:"code,omitempty"`
	Reply  Reply   `json:"reply,omitzero"`

	// Fault, Target, TStart and TEnd describe a fault; TEnd 0 is a fault
	// that had not ended when the history stopped.
	Fault  FaultKind `json:"fault,omitempty"`
	Target string    `json:"target,omitempty"`
	TStart int64     `json:"t_start,omitempty"`
	TEnd   int64     `json:"t_end,omitempty"`
}

// replied reports whether the operation got an answer from the service.
func (r *Record) replied() bool { return r.Code != CodePending && r.Code != CodeNoReply }

func (r *Record) validate() error {
	switch r.Type {
	case TypeOp:
		switch {
		case r.Proc == "" || r.Seq == 0 || r.Lease == "":
			return fmt.Errorf("%w: an op needs proc, seq and lease", ErrInvalidRecord)
		case r.Op != OpGrant && r.Op != OpRenew && r.Op != OpRelease && r.Op != OpGet:
			return fmt.Errorf("%w: op %q", ErrInvalidRecord, r.Op)
		case r.TSend <= 0:
			return fmt.Errorf("%w: t_send %d", ErrInvalidRecord, r.TSend)
		case r.Code == CodePending && r.TReply != 0:
			return fmt.Errorf("%w: a pending op has no t_reply", ErrInvalidRecord)
		case r.Code != CodePending && r.TReply < r.TSend:
			return fmt.Errorf("%w: t_reply %d before t_send %d", ErrInvalidRecord, r.TReply, r.TSend)
		case r.Op == OpGrant && r.Req.D <= 0:
			return fmt.Errorf("%w: a grant needs d_ns", ErrInvalidRecord)
		case (r.Op == OpRenew || r.Op == OpRelease) && r.Req.Token == 0:
			return fmt.Errorf("%w: a %s needs the token it presents", ErrInvalidRecord, r.Op)
		case r.Op == OpGrant && r.Code == CodeOK && r.Reply.Token == 0:
			return fmt.Errorf("%w: a granted grant needs the reply's token", ErrInvalidRecord)
		case r.Req.RequestID != "" && r.Op != OpGrant:
			return fmt.Errorf("%w: a %s has no request id", ErrInvalidRecord, r.Op)
		case r.Reply.Recovered && (r.Op != OpGrant || r.Code != CodeOK || r.Req.RequestID == ""):
			return fmt.Errorf("%w: only a granted grant with a request id can be recovered", ErrInvalidRecord)
		}
	case TypeFault:
		switch {
		case r.Fault == "":
			return fmt.Errorf("%w: a fault needs its kind", ErrInvalidRecord)
		case r.TStart <= 0:
			return fmt.Errorf("%w: t_start %d", ErrInvalidRecord, r.TStart)
		case r.TEnd != 0 && r.TEnd < r.TStart:
			return fmt.Errorf("%w: t_end %d before t_start %d", ErrInvalidRecord, r.TEnd, r.TStart)
		}
	default:
		return fmt.Errorf("%w: type %q", ErrInvalidRecord, r.Type)
	}
	return nil
}

// DecodeError says which line of a stream could not be used.
type DecodeError struct {
	Line int // from 1
	Err  error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *DecodeError) Unwrap() error { return e.Err }

// maxLine bounds one record; a longer line is malformed.
const maxLine = 64 << 10

// Decode reads one stream of records, one JSON object a line (blank
// lines are skipped). A last line that does not end in a newline and does
// not parse is what a killed process leaves: it is dropped and truncated
// is true. Any other bad line is a [*DecodeError] wrapping [ErrMalformed]
// or [ErrInvalidRecord].
func Decode(r io.Reader) (recs []Record, truncated bool, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, rerr := br.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) {
			return recs, false, &DecodeError{Line: n, Err: fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, maxLine)}
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return recs, false, rerr
		}
		last := errors.Is(rerr, io.EOF)
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var rec Record
			dec := json.NewDecoder(bytes.NewReader(t))
			dec.DisallowUnknownFields()
			derr := dec.Decode(&rec)
			if derr == nil && dec.More() {
				derr = errors.New("data after the record")
			}
			switch {
			case derr != nil && last:
				return recs, true, nil
			case derr != nil:
				return recs, false, &DecodeError{Line: n, Err: fmt.Errorf("%w: %v", ErrMalformed, derr)}
			}
			if verr := rec.validate(); verr != nil {
				return recs, false, &DecodeError{Line: n, Err: verr}
			}
			recs = append(recs, rec)
		}
		if last {
			return recs, false, nil
		}
	}
}

// Writer writes records as Decode reads them: each in one Write call
// ending in a newline, so that a killed process leaves at most its last
// line cut. It is not safe for concurrent use.
type Writer struct{ w io.Writer }

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write checks rec and writes it; an invalid record is [ErrInvalidRecord]
// and writes nothing.
func (w *Writer) Write(rec Record) error {
	if err := rec.validate(); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("faultcheck: encode: %w", err)
	}
	_, err = w.w.Write(append(b, '\n'))
	return err
}

// History is a whole run: the operations of every process and the
// faults, as [NewHistory] assembles them.
type History struct {
	// Ops are the operations, each once: a pending record that a later
	// one of the same Proc and Seq completed is replaced by it.
	Ops    []Record
	Faults []Record
}

// NewHistory assembles the streams of a run (one per process, in any
// order). The same completed operation twice, or a pending record after
// its completion, is [ErrInvalidRecord].
func NewHistory(streams ...[]Record) (*History, error) {
	type key struct {
		proc string
		seq  uint64
	}
	h := &History{}
	at := map[key]int{}
	for _, s := range streams {
		for _, rec := range s {
			if err := rec.validate(); err != nil {
				return nil, err
			}
			if rec.Type == TypeFault {
				h.Faults = append(h.Faults, rec)
				continue
			}
			k := key{rec.Proc, rec.Seq}
			i, seen := at[k]
			switch {
			case !seen:
				at[k] = len(h.Ops)
				h.Ops = append(h.Ops, rec)
			case h.Ops[i].Code == CodePending && rec.Code != CodePending:
				h.Ops[i] = rec
			default:
				return nil, fmt.Errorf("%w: %s seq %d logged twice", ErrInvalidRecord, rec.Proc, rec.Seq)
			}
		}
	}
	return h, nil
}
