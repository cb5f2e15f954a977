package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reads that decide something go to the stream leader through the
// STREAM.MSG.GET API. jetstream.Stream.GetMsg would use direct get (KV
// buckets allow it), which any replica may answer, and a follower that has
// not yet applied a revision answers "not found": a renewal verified that
// way would be refused although the holder still holds the lease.
// The one exception is a tenure's revision when the leader's API answers
// "JetStream system temporarily unavailable" (no meta leader): see
// directGetSeq.

type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// errNoMessage: the leader has no such message.
var errNoMessage = jetstream.ErrMsgNotFound

const jsErrNoMessage = 10037

// apiPrefix returns the JetStream API prefix the store's context uses.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if o.APIPrefix[len(o.APIPrefix)-1] != '.' {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	default:
		return jetstream.DefaultAPIPrefix
	}
}

// directGetSeq reads the message at seq by direct get, which any of the
// stream's replicas answers without JetStream's API (and so without a meta
// leader). Only for what cannot change under a stale replica: the message
// at a sequence. A replica that lacks it answers 404, returned as
// errNoMessage, which does not say that the leader lacks it.
func (s *Store) directGetSeq(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	body, _ := json.Marshal(msgGetRequest{Seq: seq})
	reply, err := s.nc.RequestWithContext(ctx, s.directGetSubj, body)
	if err != nil {
		return nil, err
	}
	if st := reply.Header.Get("Status"); st != "" {
		if st == "404" {
			return nil, errNoMessage
		}
		return nil, fmt.Errorf("direct get: status %s %s", st, reply.Header.Get("Description"))
	}
	subj, ts := reply.Header.Get(jetstream.SubjectHeader), reply.Header.Get(jetstream.TimeStampHeaer)
	got, err := strconv.ParseUint(reply.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || subj == "" || got != seq {
		return nil, fmt.Errorf("direct get: bad reply for sequence %d: %v", seq, reply.Header)
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, fmt.Errorf("direct get: bad time: %w", err)
	}
	return &jetstream.RawStreamMsg{Subject: subj, Sequence: got, Header: reply.Header, Data: reply.Data, Time: t}, nil
}

// leaderGet reads one message through the stream leader. Under a ctx
// without a deadline it waits as long as the JetStream context's
// DefaultTimeout (5 s unless set with [jetstream.WithDefaultTimeout]), as
// jetstream's own requests do: a read the leader never answers (paused, or
// partitioned after it took the request) waited for good, and so did a
// Store renewal under such a ctx (13 minutes in a CI run, until killed).
func (s *Store) leaderGet(ctx context.Context, req msgGetRequest) (*jetstream.RawStreamMsg, error) {
	return leaderGet(ctx, s.js, s.msgGetSubject, req)
}

// LeaderLast reads the last message of subject in stream through the
// stream's leader, as the Store's reads that decide something are (a
// work queue's sink, say): direct get, which nats.go's KV Get uses, may be
// answered by a replica that has not applied the latest write. It waits
// as [Store] reads do under a ctx without a deadline.
//
// Errors: [jetstream.ErrMsgNotFound] if subject has no message;
// JetStream's and the connection's otherwise.
func LeaderLast(ctx context.Context, js jetstream.JetStream, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return leaderGet(ctx, js, apiPrefix(js)+"STREAM.MSG.GET."+stream, msgGetRequest{LastFor: subject})
}

func leaderGet(ctx context.Context, js jetstream.JetStream, apiSubject string, req msgGetRequest) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok && js.Options().DefaultTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, js.Options().DefaultTimeout)
		defer cancel()
	}
	body, _ := json.Marshal(req)
	reply, err := js.Conn().RequestWithContext(ctx, apiSubject, body)
	if err != nil {
		return nil, err
	}
	m, err := decodeMsgGet(reply)
	if isLeaderless(err) {
		return leaderGetPastLeaderless(ctx, js.Conn(), apiSubject, body, err)
	}
	return m, err
}

// leaderGetPastLeaderless asks again, up to leaderlessAsks times
// leaderlessPause apart, after a first answer "no leader" (10008, first),
// which it returns if every answer is that. A member of the stream's
// group that sees no leader answers so at once, and the requester hears
// only the first answer to a JetStream API request (the system account
// exports the API with one response per request): one replica cut off
// from its group (its server at its storage limit, say) failed about a
// read in five through the leader the others had, each read a race
// between its "no leader" and the leader's answer (found polling serve's
// /healthz, whose check is such a read: the two healthy nodes of three
// answered 503 about 7% of the time).
func leaderGetPastLeaderless(ctx context.Context, nc *nats.Conn, apiSubject string, body []byte, first error) (*jetstream.RawStreamMsg, error) {
	for range leaderlessAsks {
		select {
		case <-time.After(leaderlessPause):
		case <-ctx.Done():
			return nil, first
		}
		reply, err := nc.RequestWithContext(ctx, apiSubject, body)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, first // the caller's time is up: what the server said
		case err != nil:
			return nil, err
		}
		if m, err := decodeMsgGet(reply); !isLeaderless(err) {
			return m, err
		}
	}
	return nil, first
}

// leaderlessAsks and leaderlessPause: see leaderGetPastLeaderless.
const (
	leaderlessAsks  = 5
	leaderlessPause = 10 * time.Millisecond
)

// jsErrClusterNotAvail is JetStream's "JetStream system temporarily
// unavailable": the answering server sees no leader for the stream.
const jsErrClusterNotAvail = 10008

func isLeaderless(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrClusterNotAvail
}

// decodeMsgGet reads a STREAM.MSG.GET answer.
func decodeMsgGet(reply *nats.Msg) (*jetstream.RawStreamMsg, error) {
	var resp msgGetResponse
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("message get: bad reply: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jsErrNoMessage {
			return nil, errNoMessage
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	m := &jetstream.RawStreamMsg{
		Subject:  resp.Message.Subject,
		Sequence: resp.Message.Sequence,
		Data:     resp.Message.Data,
		Time:     resp.Message.Time,
	}
	if len(resp.Message.Header) > 0 {
		var err error
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("message get: bad headers: %w", err)
		}
	}
	return m, nil
}
