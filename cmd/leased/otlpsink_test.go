package main_test

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// otlpSink is an OTLP/HTTP receiver for one signal: it decodes each export
// and hands it to the signal's record function under mu, then wakes those
// waiting in until.
type otlpSink struct {
	url  string
	mu   sync.Mutex
	cond *sync.Cond
}

// startOTLPSink serves OTLP/HTTP (protobuf) exports of Req, answering each
// with an empty resp.
func startOTLPSink[Req proto.Message](t *testing.T, newReq func() Req, resp proto.Message, record func(Req)) *otlpSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.cond = sync.NewCond(&s.mu)
	out, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := newReq()
		if err != nil || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		record(req)
		s.cond.Broadcast()
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// until waits, holding mu, until done says the exports so far are enough,
// or for a minute (a loaded machine delays batch exports); it returns
// done's last answer. done is called with mu held.
func (s *otlpSink) until(done func() bool) bool {
	timer := time.AfterFunc(time.Minute, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(time.Minute)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		s.cond.Wait()
	}
}
