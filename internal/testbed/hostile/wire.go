package hostile

import (
	"bytes"
	"compress/lzw"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"

	"github.com/hashicorp/memberlist"
)

// Message type bytes of memberlist's protocol (net.go, messageType). The
// values are the protocol itself: memberlist only ever appends to the list.
const (
	typeSuspect  byte = 3
	typeAlive    byte = 4
	typeDead     byte = 5
	typePushPull byte = 6
	typeCompound byte = 7
	typeUser     byte = 8
	typeCompress byte = 9
	typeEncrypt  byte = 10
	typeCRC      byte = 12
	typeErr      byte = 13
	typeLabel    byte = 244 // label header, before everything else
)

// Encryption framing (security.go): a version byte, a 12-byte random
// nonce, then the AES-GCM ciphertext and its 16-byte tag. Version 1 (no
// padding) is what every member speaking protocol version 2 or later
// writes; version 0 (PKCS#7 padded) is only read.
const (
	encVersion = 1
	nonceSize  = 12
	tagSize    = 16
)

// lzwAlgo and lzwLitWidth are memberlist's only compression algorithm.
const (
	lzwAlgo     = 0
	lzwLitWidth = 8
)

// defaultVsn is what a memberlist v0.7.0 member with a default Config sends
// as its versions: protocol min, max and current (ProtocolVersionMin,
// ProtocolVersionMax, ProtocolVersion2Compatible), then the delegate's
// min, max and current (0 unless configured).
var defaultVsn = []uint8{memberlist.ProtocolVersionMin, memberlist.ProtocolVersionMax, memberlist.ProtocolVersion2Compatible, 0, 0, 0}

// labelHeader is memberlist's packet/stream label prefix: 244, length,
// label. No label, no header.
func labelHeader(label string) []byte {
	if label == "" {
		return nil
	}
	return append([]byte{typeLabel, byte(len(label))}, label...)
}

// seal encrypts plain as memberlist's encryptPayload (version 1) does,
// with aad as the GCM additional data, appending to dst.
func seal(dst []byte, gcm cipher.AEAD, plain, aad []byte) ([]byte, error) {
	dst = append(dst, encVersion)
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	dst = append(dst, nonce...)
	return gcm.Seal(dst, nonce, plain, aad), nil
}

// open decrypts a memberlist encrypted payload (either version).
func open(gcm cipher.AEAD, msg, aad []byte) ([]byte, error) {
	if len(msg) < 1+nonceSize+tagSize {
		return nil, fmt.Errorf("encrypted payload too short (%d bytes)", len(msg))
	}
	vsn := msg[0]
	if vsn > 1 {
		return nil, fmt.Errorf("unknown encryption version %d", vsn)
	}
	plain, err := gcm.Open(nil, msg[1:1+nonceSize], msg[1+nonceSize:], aad)
	if err != nil {
		return nil, err
	}
	if vsn == 0 { // PKCS#7 padding
		if len(plain) == 0 || int(plain[len(plain)-1]) > len(plain) {
			return nil, errors.New("bad PKCS#7 padding")
		}
		plain = plain[:len(plain)-int(plain[len(plain)-1])]
	}
	return plain, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// compound packs msgs into one compound message: type, count, each
// length as a big-endian uint16, then the messages.
func compound(msgs []Msg) ([]byte, error) {
	if len(msgs) > 255 {
		return nil, fmt.Errorf("a compound message holds at most 255 messages, not %d", len(msgs))
	}
	b := []byte{typeCompound, byte(len(msgs))}
	for _, m := range msgs {
		if len(m) > 0xffff {
			return nil, fmt.Errorf("a compound part holds at most 65535 bytes, not %d", len(m))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
	}
	for _, m := range msgs {
		b = append(b, m...)
	}
	return b, nil
}

// withCRC prefixes msg with memberlist's checksum header: type 12, then
// the IEEE CRC-32 of msg, big-endian.
func withCRC(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{typeCRC}, crc32.ChecksumIEEE(msg)), msg...)
}

// compress wraps msg in a compress message (LZW, LSB order, 8-bit
// literals), as memberlist's compressPayload does.
func compress(msg []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := lzw.NewWriter(&buf, lzw.LSB, lzwLitWidth)
	if _, err := w.Write(msg); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	e := enc{b: []byte{typeCompress}}
	e.mapLen(2)
	e.str("Algo")
	e.uint(lzwAlgo)
	e.str("Buf")
	e.bytes(buf.Bytes())
	return e.b, nil
}

// maxDecompressed bounds what a reply may inflate to.
const maxDecompressed = 64 << 20

// decompress undoes compress on body, a compress message without its type
// byte.
func decompress(body []byte) ([]byte, error) {
	d := dec{b: body}
	f, err := d.object()
	if err != nil {
		return nil, err
	}
	if algo := f.uint("Algo"); algo != lzwAlgo {
		return nil, fmt.Errorf("unknown compression algorithm %d", algo)
	}
	r := lzw.NewReader(bytes.NewReader(f.bytes("Buf")), lzw.LSB, lzwLitWidth)
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, maxDecompressed+1))
	if err != nil {
		return nil, err
	}
	if len(out) > maxDecompressed {
		return nil, errors.New("decompressed reply too large")
	}
	return out, nil
}

// packet builds a UDP packet carrying msgs as a genuine member would:
// compound if more than one, compressed if asked (and smaller), CRC
// header, encryption with the label as additional data, label header.
func (f *Forger) packet(msgs []Msg) ([]byte, error) {
	var msg []byte
	switch len(msgs) {
	case 0:
		return nil, errors.New("no message to send")
	case 1:
		msg = msgs[0]
	default:
		c, err := compound(msgs)
		if err != nil {
			return nil, err
		}
		msg = c
	}
	if f.Compress {
		c, err := compress(msg)
		if err != nil {
			return nil, err
		}
		if len(c) < len(msg) {
			msg = c
		}
	}
	msg = withCRC(msg)
	out := labelHeader(f.label)
	if f.gcm == nil {
		return append(out, msg...), nil
	}
	return seal(out, f.gcm, msg, []byte(f.label))
}

// stream builds what a genuine member writes on a TCP stream it opened
// for msg: the label header, then msg (compressed if asked) either bare
// or, with a key, as an encrypt frame: type 10, the ciphertext's length
// as a big-endian uint32, the ciphertext, whose additional data is the
// frame's first five bytes followed by the label.
func (f *Forger) stream(msg []byte) ([]byte, error) {
	if f.Compress {
		c, err := compress(msg)
		if err != nil {
			return nil, err
		}
		msg = c
	}
	out := labelHeader(f.label)
	if f.gcm == nil {
		return append(out, msg...), nil
	}
	start := len(out)
	out = append(out, typeEncrypt)
	out = binary.BigEndian.AppendUint32(out, uint32(1+nonceSize+len(msg)+tagSize))
	aad := append(append([]byte{}, out[start:]...), f.label...)
	return seal(out, f.gcm, msg, aad)
}

// maxReply bounds the encrypted reply Forger reads from a stream.
const maxReply = 64 << 20

// readReply reads one message a member writes back on a stream (no label
// header: members label only streams they open), decrypts and
// decompresses it, and returns its type byte and body.
func (f *Forger) readReply(conn net.Conn) (byte, []byte, error) {
	var t [1]byte
	if _, err := io.ReadFull(conn, t[:]); err != nil {
		return 0, nil, err
	}
	var msg []byte
	switch {
	case t[0] == typeEncrypt:
		if f.gcm == nil {
			return 0, nil, errors.New("reply is encrypted and this Forger has no key")
		}
		hdr := make([]byte, 5)
		hdr[0] = typeEncrypt
		if _, err := io.ReadFull(conn, hdr[1:]); err != nil {
			return 0, nil, err
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxReply {
			return 0, nil, fmt.Errorf("reply of %d bytes is too large", n)
		}
		ct := make([]byte, n)
		if _, err := io.ReadFull(conn, ct); err != nil {
			return 0, nil, err
		}
		plain, err := open(f.gcm, ct, append(hdr, f.label...))
		if err != nil {
			return 0, nil, fmt.Errorf("decrypt reply: %w", err)
		}
		msg = plain
	case f.gcm != nil:
		return 0, nil, fmt.Errorf("reply of type %d is not encrypted", t[0])
	default:
		// A bare message runs to the end of the stream: the member
		// closes it after replying.
		rest, err := io.ReadAll(io.LimitReader(conn, maxReply))
		if err != nil {
			return 0, nil, err
		}
		msg = append(t[:], rest...)
	}
	if len(msg) == 0 {
		return 0, nil, errors.New("empty reply")
	}
	if msg[0] == typeCompress {
		d, err := decompress(msg[1:])
		if err != nil {
			return 0, nil, fmt.Errorf("decompress reply: %w", err)
		}
		if len(d) == 0 {
			return 0, nil, errors.New("empty decompressed reply")
		}
		msg = d
	}
	return msg[0], msg[1:], nil
}
