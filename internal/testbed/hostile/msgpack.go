package hostile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// This file is a minimal MessagePack codec for memberlist's message
// structs, byte for byte as memberlist's encoder (hashicorp/go-msgpack
// with a zero MsgpackHandle) writes them:
//
//   - a struct is a map from field name to value, fields sorted by name
//     (go-msgpack sorts them when it writes a map), fields tagged
//     omitempty left out when empty;
//   - strings and []byte use the old "raw" family only: fixstr, str16,
//     str32 (no str8, no bin: WriteExt is off); a nil []byte is nil;
//   - unsigned integers take the smallest of fixint/uint8/16/32/64;
//     non-negative signed ones fixint, else int16/32/64 (never int8 or
//     the uint family).
//
// The decoder is lenient (any integer or raw/str/bin form) because it
// only reads what a genuine member sends back.

// enc appends MessagePack to b.
type enc struct{ b []byte }

func (e *enc) mapLen(n int) { e.container(0x80, 16, 0xde, 0xdf, n) }

func (e *enc) raw(b []byte) {
	e.container(0xa0, 32, 0xda, 0xdb, len(b))
	e.b = append(e.b, b...)
}

func (e *enc) str(s string) { e.raw([]byte(s)) }

// bytes is a []byte field: nil stays nil, as go-msgpack writes it.
func (e *enc) bytes(b []byte) {
	if b == nil {
		e.b = append(e.b, 0xc0)
		return
	}
	e.raw(b)
}

func (e *enc) container(fix byte, fixCut int, b16, b32 byte, n int) {
	switch {
	case n < fixCut:
		e.b = append(e.b, fix|byte(n))
	case n <= math.MaxUint16:
		e.b = append(e.b, b16)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	default:
		e.b = append(e.b, b32)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
}

func (e *enc) uint(v uint64) {
	switch {
	case v <= math.MaxInt8:
		e.b = append(e.b, byte(v))
	case v <= math.MaxUint8:
		e.b = append(e.b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xce), uint32(v))
	default:
		e.b = binary.BigEndian.AppendUint64(append(e.b, 0xcf), v)
	}
}

func (e *enc) int(v int64) {
	switch {
	case v >= -32 && v <= math.MaxInt8:
		e.b = append(e.b, byte(v))
	case v >= math.MinInt8 && v < 0:
		e.b = append(e.b, 0xd0, byte(v))
	case v >= math.MinInt16 && v <= math.MaxInt16:
		e.b = binary.BigEndian.AppendUint16(append(e.b, 0xd1), uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 0xd2), uint32(v))
	default:
		e.b = binary.BigEndian.AppendUint64(append(e.b, 0xd3), uint64(v))
	}
}

func (e *enc) bool(v bool) {
	if v {
		e.b = append(e.b, 0xc3)
	} else {
		e.b = append(e.b, 0xc2)
	}
}

// dec reads MessagePack values from b, advancing past each.
type dec struct{ b []byte }

var errShort = errors.New("msgpack: truncated")

func (d *dec) take(n int) ([]byte, error) {
	if n < 0 || len(d.b) < n {
		return nil, errShort
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v, nil
}

func (d *dec) n(size int) (int, error) {
	v, err := d.take(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(v[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(v)), nil
	default:
		u := binary.BigEndian.Uint32(v)
		if uint64(u) > math.MaxInt32 {
			return 0, errors.New("msgpack: length too large")
		}
		return int(u), nil
	}
}

// value decodes one value: nil, bool, int64, uint64, float64, []byte
// (every string or binary form), []any or map[string]any.
func (d *dec) value() (any, error) {
	hb, err := d.take(1)
	if err != nil {
		return nil, err
	}
	h := hb[0]
	switch {
	case h <= 0x7f:
		return int64(h), nil
	case h >= 0xe0:
		return int64(int8(h)), nil
	case h&0xf0 == 0x80:
		return d.mapOf(int(h & 0x0f))
	case h&0xf0 == 0x90:
		return d.arrayOf(int(h & 0x0f))
	case h&0xe0 == 0xa0:
		return d.rawOf(int(h & 0x1f))
	}
	var size int
	switch h {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xd9:
		size = 1
	case 0xc5, 0xda:
		size = 2
	case 0xc6, 0xdb:
		size = 4
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err := d.take(1 << (h - 0xcc))
		if err != nil {
			return nil, err
		}
		var u uint64
		for _, c := range v {
			u = u<<8 | uint64(c)
		}
		return u, nil
	case 0xd0, 0xd1, 0xd2, 0xd3:
		v, err := d.take(1 << (h - 0xd0))
		if err != nil {
			return nil, err
		}
		switch len(v) {
		case 1:
			return int64(int8(v[0])), nil
		case 2:
			return int64(int16(binary.BigEndian.Uint16(v))), nil
		case 4:
			return int64(int32(binary.BigEndian.Uint32(v))), nil
		default:
			return int64(binary.BigEndian.Uint64(v)), nil
		}
	case 0xca:
		v, err := d.take(4)
		if err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(v))), nil
	case 0xcb:
		v, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(v)), nil
	case 0xdc, 0xdd:
		n, err := d.n(2 << (h - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.arrayOf(n)
	case 0xde, 0xdf:
		n, err := d.n(2 << (h - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapOf(n)
	default:
		return nil, fmt.Errorf("msgpack: unsupported type byte 0x%02x", h)
	}
	n, err := d.n(size)
	if err != nil {
		return nil, err
	}
	return d.rawOf(n)
}

func (d *dec) rawOf(n int) ([]byte, error) {
	v, err := d.take(n)
	if err != nil {
		return nil, err
	}
	return append([]byte{}, v...), nil
}

func (d *dec) arrayOf(n int) ([]any, error) {
	if n > len(d.b) {
		return nil, errShort
	}
	out := make([]any, 0, n)
	for range n {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (d *dec) mapOf(n int) (map[string]any, error) {
	if 2*n > len(d.b) {
		return nil, errShort
	}
	out := make(map[string]any, n)
	for range n {
		k, err := d.value()
		if err != nil {
			return nil, err
		}
		ks, ok := k.([]byte)
		if !ok {
			return nil, fmt.Errorf("msgpack: map key %v is not a string", k)
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		out[string(ks)] = v
	}
	return out, nil
}

// object decodes one map, as memberlist encodes a struct.
func (d *dec) object() (fields, error) {
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("msgpack: want a map, got %T", v)
	}
	return fields(m), nil
}

// fields is a decoded struct; its getters return the zero value for a
// missing field or one of another kind.
type fields map[string]any

func (f fields) uint(name string) uint64 {
	switch v := f[name].(type) {
	case uint64:
		return v
	case int64:
		if v >= 0 {
			return uint64(v)
		}
	}
	return 0
}

func (f fields) int(name string) int64 {
	switch v := f[name].(type) {
	case int64:
		return v
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v)
		}
	}
	return 0
}

func (f fields) bytes(name string) []byte {
	b, _ := f[name].([]byte)
	return b
}

func (f fields) str(name string) string { return string(f.bytes(name)) }

func (f fields) bool(name string) bool {
	b, _ := f[name].(bool)
	return b
}
