// Package atomicbatch publishes messages to a JetStream stream as one
// atomic batch (nats-server 2.12 and later, on a stream with
// AllowAtomicPublish): the server stores all of them or none, and
// acknowledges once, after the sync. nats.go has no batch API; this is the
// wire protocol (../shared/DESIGN.md §2, items 16–17), in one place for the
// lease store's group commit and the history's appends.
//
// What a batch costs and refuses is the server's: on R1 about four fsyncs
// whatever its size (it is staged in a file store of its own), on R3 one
// raft proposal. One failed expectation, a duplicate Nats-Msg-Id, or two
// messages to one subject with expectations refuse the whole batch,
// naming no message.
package atomicbatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Headers of an atomic batch (nats-server stream.go).
const (
	HeaderID     = "Nats-Batch-Id"
	HeaderSeq    = "Nats-Batch-Sequence"
	HeaderCommit = "Nats-Batch-Commit"
)

// Headers is how many headers Publish adds to a message, at most: room
// to leave in a header map made for a batch.
const Headers = 3

// Error codes of the refusals callers act on.
const (
	ErrCodeDisabled  = 10174 // the stream does not allow atomic publish
	ErrCodeDuplicate = 10201 // a message ID of the batch is a duplicate (of one stored, or in the batch)
)

// ack is the server's answer to a batch's commit message.
type ack struct {
	Seq   uint64              `json:"seq"`
	Batch string              `json:"batch"`
	Count int                 `json:"count"`
	Error *jetstream.APIError `json:"error"`
}

// Publish sends msgs as one atomic batch and returns the stream sequence
// each was stored at, in order. Each message keeps its subject, data and
// headers, and gets the batch headers too: msgs are the batch's own, not
// to be sent again (callers build them for it; copying each one's headers
// was 2% of what a loaded grantor allocated). Messages 1..n−1 go without a
// reply subject; the commit (message n) is a request whose answer is the
// batch's one ack. An error that is a *jetstream.APIError means the server
// refused the batch and stored none of it; any other error means no
// answer: it may have been stored.
func Publish(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) ([]uint64, error) {
	n := len(msgs)
	if n == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("batch not sent: %w", err) // nothing of it sent
	}
	id := nuid.Next()
	var commit *nats.Msg
	// The header values in one allocation for the batch, not one each.
	vals := make([]string, 2*n+1)
	for i, m := range msgs {
		if m.Header == nil {
			m.Header = make(nats.Header, Headers)
		}
		v := vals[2*i : 2*i+2 : 2*i+2]
		v[0], v[1] = id, strconv.Itoa(i+1)
		m.Header[HeaderID], m.Header[HeaderSeq] = v[0:1:1], v[1:2:2]
		if i == n-1 {
			vals[2*n] = "1"
			m.Header[HeaderCommit] = vals[2*n:]
			commit = m
			break
		}
		if err := nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("batch message %d of %d: %w", i+1, n, err)
		}
	}
	reply, err := nc.RequestMsgWithContext(ctx, commit)
	if err != nil {
		return nil, fmt.Errorf("batch commit: %w", err)
	}
	var a ack
	if err := json.Unmarshal(reply.Data, &a); err != nil {
		return nil, fmt.Errorf("batch ack %q: %w", reply.Data, err)
	}
	switch {
	case a.Error != nil:
		return nil, a.Error
	case a.Batch != id || a.Count != n || a.Seq < uint64(n):
		return nil, fmt.Errorf("batch ack for %q of %d at %d, sent %q of %d", a.Batch, a.Count, a.Seq, id, n)
	}
	// The server commits a batch contiguously: message i of n is at
	// seq − n + i.
	seqs := make([]uint64, n)
	for i := range seqs {
		seqs[i] = a.Seq - uint64(n) + uint64(i) + 1
	}
	return seqs, nil
}
