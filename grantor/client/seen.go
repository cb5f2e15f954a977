package client

import (
	"sync"
	"time"

	"github.com/leased/leased/kvlease"
)

// seenTokens remembers, per lease, the highest token a reply to this
// client has shown, for seenWindow: a "held" answer naming an older tenure
// comes from a node whose view is behind one this client has seen (a
// stream leader cut off from its peers that has not yet stepped down reads
// from its frozen state), and is not an answer. ZooKeeper's clients refuse
// a server behind the last zxid they saw for the same reason. The window
// bounds what a bucket deleted and created again (its tokens start over)
// can cost: refusals for that long.
//
// Memory is bounded by seenMax leases in two generations: notes go into
// cur, and when cur has seenMax/2 leases it becomes old and the previous
// old is dropped, so the seenMax/2 leases noted last are always
// remembered and a note costs O(1) however many leases the client holds
// (a holder of 100,000 leases renews each through here).
type seenTokens struct {
	mu       sync.Mutex
	cur, old map[string]seenToken
}

type seenToken struct {
	token kvlease.Token
	at    time.Time
}

const (
	seenWindow = time.Minute
	seenMax    = 4096
)

// lookupLocked returns the latest entry of name, in either generation.
func (s *seenTokens) lookupLocked(name string) (seenToken, bool) {
	if e, ok := s.cur[name]; ok {
		return e, true
	}
	e, ok := s.old[name]
	return e, ok
}

// note records that a reply showed tenure tok of name at now.
func (s *seenTokens) note(name string, tok kvlease.Token, now time.Time) {
	if tok == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.lookupLocked(name); ok && cur.token > tok && now.Sub(cur.at) < seenWindow {
		return
	}
	if _, ok := s.cur[name]; !ok && len(s.cur) >= seenMax/2 {
		s.old, s.cur = s.cur, s.old
		clear(s.cur) // keeps its buckets: no allocation per generation
	}
	if s.cur == nil {
		s.cur = make(map[string]seenToken, seenMax/2)
	}
	s.cur[name] = seenToken{tok, now}
}

// newer returns a token of name above tok seen within the window.
func (s *seenTokens) newer(name string, tok kvlease.Token, now time.Time) (kvlease.Token, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.lookupLocked(name)
	if !ok || cur.token <= tok || now.Sub(cur.at) >= seenWindow {
		return 0, false
	}
	return cur.token, true
}
