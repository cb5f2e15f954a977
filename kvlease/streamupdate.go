package kvlease

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// UpdateStream updates a stream to cfg, as js.UpdateStream does, but
// learns at once of a NATS user that may not publish the update
// ($JS.API.STREAM.UPDATE.<stream>) or receive its answer: the server
// answers such a request with nothing, and only tells the connection's
// error handler, so js.UpdateStream waited until its ctx ended and Open
// retried it as if JetStream were out, until its own ended (found by an
// outside client). The request is sent by hand and followed by a flush:
// the server reports a refused publish before it answers the flush's
// PING, so once the flush returns, the connection's last error says
// whether this request was refused. That is [ErrPermission], naming the
// subject (and matching nats.ErrPermissionViolation). A ctx without a
// deadline is given JetStream's default timeout. Other errors are
// nats.go's, untranslated (see [JetStreamError]). It is for packages built
// on kvlease that keep streams of their own (the grantor's history).
func UpdateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if _, ok := ctx.Deadline(); !ok { // as nats.go bounds its API requests
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	nc := js.Conn()
	subject := apiPrefix(js) + "STREAM.UPDATE." + cfg.Name
	body, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	before := nc.LastError()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return nil, err
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	if err := nc.LastError(); err != before && deniedFor(err, subject, inbox) {
		return nil, fmt.Errorf("%w: the NATS server does not let this user update stream %s (publish to %q, and receive the answer): %w",
			ErrPermission, cfg.Name, subject, err)
	}
	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	var resp struct {
		Error  *jetstream.APIError     `json:"error"`
		Config *jetstream.StreamConfig `json:"config"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrInvalidJetStreamResponse, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return nil, jetstream.ErrStreamNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Config == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	return js.Stream(ctx, cfg.Name)
}

// deniedFor reports whether err, a connection's last error, is a
// permissions violation for a publish to subject or a subscription to
// inbox.
func deniedFor(err error, subject, inbox string) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, strings.ToLower(`publish to "`+subject+`"`)) ||
		strings.Contains(s, strings.ToLower(`subscription to "`+inbox+`"`))
}
