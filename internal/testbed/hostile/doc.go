// Package hostile is an attacker for security tests: it plays a
// compromised member that holds the gossip ring's shared key and label
// (memberlist's Config.SecretKey and Config.Label) and hand-builds
// memberlist v0.7.0 packets and streams, so that a test can forge every
// gossip message a genuine member would accept: alive, suspect and dead
// messages about any member, user messages over UDP and TCP, and whole
// push/pull state exchanges.
//
// It is a test-only tool. Never import it from anything but _test.go
// files and test harnesses, and never point it at anything but loopback
// addresses or hosts in a network namespace the test created itself: a
// Forger refuses other targets unless AllowNonLoopback is set, which is
// for such namespaces only.
//
// # Wire format
//
// The encoding follows memberlist v0.7.0 (net.go, security.go, label.go,
// util.go); TestWireMatchesMemberlist checks it byte for byte against what
// real members send:
//
//   - A message is its type byte (alive 4, suspect 3, dead 5, user 8,
//     push/pull 6, compound 7, compress 9, encrypt 10, CRC 12) followed by
//     the MessagePack encoding of memberlist's struct as
//     hashicorp/go-msgpack writes it: a map from field name to value.
//   - A UDP packet is: label header (244, length, label; none without a
//     label), then, with a key, the encryption version byte (1), a
//     12-byte nonce and the AES-GCM ciphertext+tag of the plaintext with
//     the label as additional data. The plaintext is a CRC header (12,
//     big-endian IEEE CRC-32 of the rest) and the message, or a compound
//     of several (7, count, big-endian uint16 lengths, messages).
//   - A TCP stream is: label header, then, with a key, an encrypt frame
//     (10, big-endian uint32 ciphertext length, ciphertext) whose
//     additional data is the frame's first five bytes and the label; the
//     plaintext is the message. A member's reply on the same stream has
//     no label header.
//
// Probes (ping, indirect ping, ack, nack) are not built here: a
// compromised worker that wants to answer them can run a genuine
// memberlist under any name it likes.
package hostile
