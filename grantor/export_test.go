package grantor

import (
	"time"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
)

// SetObservedHook makes s's observer call f with the revision of each
// change of the bucket it has handled (reported, or skipped as its own).
// Call it before Start.
func SetObservedHook(s *Service, f func(rev uint64)) { s.onObserved = f }

// WithObservedHook is SetObservedHook as an option of New.
func WithObservedHook(f func(rev uint64)) Option {
	return func(s *Service) error {
		s.onObserved = f
		return nil
	}
}

// WithFeedHook makes s's observer call f(true) when it moves to the
// service's own watch and f(false) when the feed cuts it off; buffer, if
// above 0, is the feed's buffer instead of feedBuffer.
func WithFeedHook(buffer int, f func(on bool)) Option {
	return func(s *Service) error {
		s.feed.size, s.onFeed = buffer, f
		return nil
	}
}

// WithOverdueSweep makes s's observer look for tenures the server kept
// past their TTL every d instead of every 5 s, the first time after d
// (instead of 1 s).
func WithOverdueSweep(d time.Duration) Option {
	return func(s *Service) error {
		s.overdueSweep = d
		return nil
	}
}

// WithHistoryLinger makes s's observer hold its records up to d for more
// (instead of 2 ms), and call reported with the revision of each change it
// has queued a record of.
func WithHistoryLinger(d time.Duration, reported func(rev uint64)) Option {
	return func(s *Service) error {
		s.historyLinger, s.onReported = d, reported
		return nil
	}
}

// WithEndCheckedHook makes s's observer call f with each tenure its
// replay showed live once checked against the history, and whether it
// ended it, or the error of a check that failed.
func WithEndCheckedHook(f func(rec kvlease.Record, ended bool, err error)) Option {
	return func(s *Service) error {
		s.onEndChecked = f
		return nil
	}
}

// WithVanishedHook makes s's observer call f with the ends of tenures that
// ended unobserved it found at a takeover (endVanished): before it queues
// them (sent false), and with those it queued (sent true).
func WithVanishedHook(f func(ends []history.Record, sent bool)) Option {
	return func(s *Service) error {
		s.onVanished = f
		return nil
	}
}
