package faultcheck_test

import (
	"time"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

// Histories in tests are written in milliseconds from an arbitrary origin
// of the monotonic clock (t_send must be positive).
const origin = int64(1_000_000_000)

func at(ms int64) int64 { return origin + ms*int64(time.Millisecond) }

// d3 is the lease duration of the made-up histories. Its window is
// 3 s·(1−0.001) − 300 ms = 2697 ms (docs/safety.md).
const d3 = 3 * time.Second

// hist builds a history: each method appends one operation of proc and
// returns the builder, numbering each proc's operations.
type hist struct {
	recs []faultcheck.Record
	seq  map[string]uint64
}

func newHist() *hist { return &hist{seq: map[string]uint64{}} }

func (h *hist) op(proc, lease string, op faultcheck.OpKind, s, r int64, req faultcheck.Request, code string, reply faultcheck.Reply) *hist {
	h.seq[proc]++
	rec := faultcheck.Record{Type: faultcheck.TypeOp, Proc: proc, Seq: h.seq[proc], Holder: proc, Lease: lease, Op: op,
		TSend: at(s), Req: req, Code: code, Reply: reply}
	if code != faultcheck.CodePending {
		rec.TReply = at(r)
	}
	h.recs = append(h.recs, rec)
	return h
}

// grant: an acknowledged grant of token tok.
func (h *hist) grant(proc, lease string, s, r int64, tok uint64) *hist {
	return h.op(proc, lease, faultcheck.OpGrant, s, r, faultcheck.Request{D: int64(d3)}, faultcheck.CodeOK,
		faultcheck.Reply{Holder: proc, Token: tok, Revision: tok})
}

// grantFails: a grant answered with code (and the holder's token a held
// error names).
func (h *hist) grantFails(proc, lease string, s, r int64, code string, heldTok uint64) *hist {
	var rep faultcheck.Reply
	if heldTok != 0 {
		rep = faultcheck.Reply{Holder: "?", Token: heldTok}
	}
	return h.op(proc, lease, faultcheck.OpGrant, s, r, faultcheck.Request{D: int64(d3)}, code, rep)
}

// renew: an acknowledged renewal of tok at rev, giving newRev.
func (h *hist) renew(proc, lease string, s, r int64, tok, rev, newRev uint64) *hist {
	return h.op(proc, lease, faultcheck.OpRenew, s, r, faultcheck.Request{Token: tok, Revision: rev}, faultcheck.CodeOK,
		faultcheck.Reply{Holder: proc, Token: tok, Revision: newRev})
}

// renewFails: a renewal answered with code (a conflict names rev).
func (h *hist) renewFails(proc, lease string, s, r int64, tok, rev uint64, code string, replyRev uint64) *hist {
	return h.op(proc, lease, faultcheck.OpRenew, s, r, faultcheck.Request{Token: tok, Revision: rev}, code,
		faultcheck.Reply{Revision: replyRev})
}

func (h *hist) release(proc, lease string, s, r int64, tok, rev uint64) *hist {
	return h.op(proc, lease, faultcheck.OpRelease, s, r, faultcheck.Request{Token: tok, Revision: rev}, faultcheck.CodeOK, faultcheck.Reply{})
}

// get: a read showing tok at rev.
func (h *hist) get(proc, lease string, s, r int64, tok, rev uint64) *hist {
	return h.op(proc, lease, faultcheck.OpGet, s, r, faultcheck.Request{}, faultcheck.CodeOK,
		faultcheck.Reply{Holder: "?", Token: tok, Revision: rev})
}

// fault: a fault from..to; to -1 is a fault that had not ended.
func (h *hist) fault(kind faultcheck.FaultKind, target string, from, to int64) *hist {
	rec := faultcheck.Record{Type: faultcheck.TypeFault, Fault: kind, Target: target, TStart: at(from)}
	if to >= 0 {
		rec.TEnd = at(to)
	}
	h.recs = append(h.recs, rec)
	return h
}

func (h *hist) history() (*faultcheck.History, error) { return faultcheck.NewHistory(h.recs) }

// attempt: an attempt of grant request rid, answered with code and reply.
func (h *hist) attempt(proc, lease, rid string, s, r int64, code string, reply faultcheck.Reply) *hist {
	return h.op(proc, lease, faultcheck.OpGrant, s, r, faultcheck.Request{D: int64(d3), RequestID: rid}, code, reply)
}

// recovered: an attempt of request rid answered with token tok, which an
// earlier attempt of it made.
func (h *hist) recovered(proc, lease, rid string, s, r int64, tok uint64) *hist {
	return h.attempt(proc, lease, rid, s, r, faultcheck.CodeOK,
		faultcheck.Reply{Holder: proc, Token: tok, Revision: tok, Recovered: true})
}

// heldBy is the reply of a grant refused held, naming holder and tok.
func heldBy(holder string, tok uint64) faultcheck.Reply {
	return faultcheck.Reply{Holder: holder, Token: tok}
}
