package kvlease

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/telemetry"
)

const instrumentationName = "github.com/leased/leased/kvlease"

func (s *Store) startSpan(ctx context.Context, op, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, "lease."+op, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() { // else the attributes would be made for nothing, per renewal
		span.SetAttributes(append(attrs, telemetry.AttrName.String(name))...)
	}
	return ctx, span
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
	if !span.IsRecording() {
		return // a link would be dropped: parse nothing
	}
	if sc := spanContextOf(grantTrace); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{telemetry.AttrCause.String("tenure")}})
	}
}

// SpanContextOfGrant returns the span context of the grant that began rec's
// tenure (invalid if it was not traced).
func SpanContextOfGrant(rec Record) trace.SpanContext { return spanContextOf(rec.GrantTrace) }

// endSpan records the outcome of an operation on span and ends it. The
// attributes are set in one call (the SDK grows a span's attributes per
// call), and only on a recording span, which alone would keep them.
func endSpan(span trace.Span, rec *Record, err error) {
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 5)
		if rec != nil && rec.Revision != 0 {
			attrs = append(attrs,
				telemetry.AttrHolder.String(rec.Holder),
				telemetry.AttrToken.Int64(int64(rec.Token)),
				telemetry.AttrRevision.Int64(int64(rec.Revision)),
				telemetry.AttrTTL.Int64(int64(rec.TTL.Seconds())),
			)
		}
		span.SetAttributes(append(attrs, telemetry.AttrOutcome.String(outcome(err)))...)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
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
	case errors.Is(err, ErrRequestUsed):
		return "request_used"
	case errors.Is(err, ErrRequestMismatch):
		return "request_mismatch"
	case errors.Is(err, ErrInvalidName), errors.Is(err, ErrInvalidHolder),
		errors.Is(err, ErrDurationOutOfRange), errors.Is(err, ErrInvalidTiming), errors.Is(err, ErrInvalidRequestID):
		return "invalid_argument"
	default:
		return "error"
	}
}
