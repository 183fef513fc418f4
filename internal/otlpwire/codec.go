package otlpwire

import (
	"fmt"

	"google.golang.org/grpc/mem"

	"github.com/ipclab/logagg/internal/bufpool"
)

// Raw is a protobuf message kept as its encoding: what Codec reads a
// request into and writes a response from. Codec takes a buffer to read
// into from Pool when one is set, else from bufpool's shared pools.
type Raw struct {
	B    []byte
	Pool *bufpool.Bounded
}

// Codec is a gRPC codec (encoding.CodecV2) that passes *Raw messages
// through as bytes, so that the receiver decodes requests itself and the
// forwarder sends requests it encoded itself. Its name is "proto": on the
// wire the content type stays application/grpc+proto.
type Codec struct{}

// Name implements encoding.CodecV2.
func (Codec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*Raw)
	if !ok {
		return nil, fmt.Errorf("otlpwire: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(r.B)}, nil
}

// Unmarshal implements encoding.CodecV2: the message is copied into the
// Raw's own buffer (reused when large enough, else one of its size class
// from its Pool or bufpool), since gRPC frees data once Unmarshal returns.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*Raw)
	if !ok {
		return fmt.Errorf("otlpwire: cannot unmarshal into %T", v)
	}
	n := data.Len()
	if cap(r.B) < n {
		if r.Pool != nil {
			r.Pool.Put(r.B)
			r.B = r.Pool.Get(n)
		} else {
			bufpool.Put(r.B)
			r.B = bufpool.Get(bufpool.Size(n))
		}
	}
	r.B = r.B[:0]
	for _, b := range data {
		r.B = append(r.B, b.ReadOnlyData()...)
	}
	return nil
}
