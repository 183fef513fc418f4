package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// NewHandler returns a slog.Handler that sends every record through w as
// one JSON record, whatever w's format: "timestamp" (RFC 3339, nanoseconds),
// "level", "message", then the attributes, groups as nested objects, plus
// the "source" and seq members the Writer adds. With opts.AddSource the
// caller goes in "caller" as "file:line" ("source" is the producer's name).
// opts.ReplaceAttr is applied to attributes, not to the built-in members.
// The handler is safe for concurrent use; records are formatted outside the
// Writer's lock. opts may be nil.
func NewHandler(w *Writer, opts *slog.HandlerOptions) slog.Handler {
	h := &handler{w: w}
	if opts != nil {
		h.opts = *opts
	}
	return h
}

type handler struct {
	w      *Writer
	opts   slog.HandlerOptions
	pre    []byte   // attrs from WithAttrs, already encoded, each preceded by ','
	groups []string // every group opened by WithGroup, outermost first
	opened int      // how many of groups are already opened in pre
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	min := slog.LevelInfo
	if h.opts.Level != nil {
		min = h.opts.Level.Level()
	}
	return l >= min
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b = append(b, `"timestamp":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":`...)
	b = appendJSONString(b, r.Level.String())
	b = append(b, `,"message":`...)
	b = appendJSONString(b, r.Message)
	if h.opts.AddSource && r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		b = append(b, `,"caller":`...)
		b = appendJSONString(b, f.File+":"+strconv.Itoa(f.Line))
	}
	b = append(b, h.pre...)
	opened := h.opened
	if r.NumAttrs() > 0 {
		// Open the groups that WithAttrs has not opened yet, unless every
		// attribute turns out empty; slog omits empty groups.
		mark := len(b)
		for _, g := range h.groups[opened:] {
			b = comma(b)
			b = appendJSONString(b, g)
			b = append(b, ":{"...)
		}
		inner := len(b)
		r.Attrs(func(a slog.Attr) bool {
			b = h.appendAttr(b, a, h.groups)
			return true
		})
		if len(b) == inner {
			b = b[:mark]
		} else {
			opened = len(h.groups)
		}
	}
	for i := 0; i < opened; i++ {
		b = append(b, '}')
	}
	err := h.w.writeJSONMembers(t, b)
	*bp = b
	bufPool.Put(bp)
	return err
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	h2 := *h
	b := append([]byte(nil), h.pre...)
	mark := len(b)
	for _, g := range h.groups[h.opened:] {
		b = comma(b)
		b = appendJSONString(b, g)
		b = append(b, ":{"...)
	}
	inner := len(b)
	for _, a := range attrs {
		b = h.appendAttr(b, a, h.groups)
	}
	if len(b) == inner {
		b = b[:mark]
	} else {
		h2.opened = len(h.groups)
	}
	h2.pre = b
	h2.groups = append([]string(nil), h.groups...)
	return &h2
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.groups = append(append([]string(nil), h.groups...), name)
	return &h2
}

// comma appends the separator before a member, except right after the '{'
// that opens a group: no JSON value ends in '{', so that byte tells.
func comma(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '{' {
		return b
	}
	return append(b, ',')
}

// appendAttr appends ,"key":value (or nothing for an empty attribute).
func (h *handler) appendAttr(b []byte, a slog.Attr, groups []string) []byte {
	a.Value = a.Value.Resolve()
	if h.opts.ReplaceAttr != nil && a.Value.Kind() != slog.KindGroup {
		a = h.opts.ReplaceAttr(groups, a)
		a.Value = a.Value.Resolve()
	}
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		attrs := a.Value.Group()
		if len(attrs) == 0 {
			return b
		}
		if a.Key == "" { // inline
			for _, ga := range attrs {
				b = h.appendAttr(b, ga, groups)
			}
			return b
		}
		mark := len(b)
		b = comma(b)
		b = appendJSONString(b, a.Key)
		b = append(b, ":{"...)
		inner := len(b)
		sub := append(groups[:len(groups):len(groups)], a.Key)
		for _, ga := range attrs {
			b = h.appendAttr(b, ga, sub)
		}
		if len(b) == inner {
			return b[:mark]
		}
		return append(b, '}')
	}
	b = comma(b)
	b = appendJSONString(b, a.Key)
	b = append(b, ':')
	return appendValue(b, a.Value)
}

func appendValue(b []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendJSONString(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		f := v.Float64()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return appendJSONString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		return strconv.AppendInt(b, int64(v.Duration()), 10)
	case slog.KindTime:
		b = append(b, '"')
		b = v.Time().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	default:
		x := v.Any()
		if e, ok := x.(error); ok {
			return appendJSONString(b, e.Error())
		}
		js, err := json.Marshal(x)
		if err != nil {
			return appendJSONString(b, v.String())
		}
		return append(b, js...)
	}
}
