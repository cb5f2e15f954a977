package kvlease

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const instrumentationName = "github.com/leased/leased/kvlease"

// Span attribute keys, shared with the grantor and telemetry packages.
const (
	AttrName     = attribute.Key("lease.name")
	AttrHolder   = attribute.Key("lease.holder")
	AttrToken    = attribute.Key("lease.token")
	AttrRevision = attribute.Key("lease.revision")
	AttrDuration = attribute.Key("lease.duration_ms")
	AttrTTL      = attribute.Key("lease.ttl_s")
	AttrOutcome  = attribute.Key("lease.outcome")
	AttrCause    = attribute.Key("lease.cause")
	// Set by the holder's spans (lease.holder.*), which know what the
	// grantor does not: the holder's margin m_h, and the time its lease had
	// left when the request went out and after the reply.
	AttrHolderMargin   = attribute.Key("lease.holder_margin_ms")
	AttrRemaining      = attribute.Key("lease.remaining_ms")
	AttrRemainingAfter = attribute.Key("lease.remaining_after_ms")
)

func (s *Store) startSpan(ctx context.Context, op, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append(attrs, AttrName.String(name))
	return s.tracer.Start(ctx, "lease."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// traceparent returns the W3C traceparent of ctx's span ("" if none).
func traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// spanContextOf parses a traceparent.
func spanContextOf(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// linkTo links span to the grant's span, so that a renewal (its own short
// trace) can be found from the tenure's trace and back.
func linkTo(span trace.Span, grantTrace string) {
	if sc := spanContextOf(grantTrace); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrCause.String("tenure")}})
	}
}

// SpanContextOfGrant returns the span context of the grant that began rec's
// tenure (invalid if it was not traced).
func SpanContextOfGrant(rec Record) trace.SpanContext { return spanContextOf(rec.GrantTrace) }

// endSpan records the outcome of an operation on span and ends it.
func endSpan(span trace.Span, rec *Record, err error) {
	if rec != nil && rec.Revision != 0 {
		span.SetAttributes(
			AttrHolder.String(rec.Holder),
			AttrToken.Int64(int64(rec.Token)),
			AttrRevision.Int64(int64(rec.Revision)),
			AttrTTL.Int64(int64(rec.TTL.Seconds())),
		)
	}
	span.SetAttributes(AttrOutcome.String(outcome(err)))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// outcome is a low-cardinality label for err.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrHeld):
		return "held"
	case errors.Is(err, ErrNotHolder):
		return "not_holder"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrInvalidName), errors.Is(err, ErrInvalidHolder),
		errors.Is(err, ErrDurationOutOfRange), errors.Is(err, ErrInvalidTiming):
		return "invalid_argument"
	default:
		return "error"
	}
}
