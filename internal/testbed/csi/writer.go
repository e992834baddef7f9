package csi

import (
	"encoding/json"
	"log/slog"
	"os"
	"time"
)

// Record is one line of a volume file, written by the workload writer.
type Record struct {
	// T is the wall-clock time of the write, in Unix nanoseconds.
	T int64 `json:"t"`
	// Pod is "namespace/name", or the pod UID when the kubelet did not
	// pass pod information.
	Pod  string `json:"pod"`
	Node string `json:"node"`
	Boot string `json:"boot"`
	// Seq counts the writer's records from 1.
	Seq int64 `json:"seq"`
	// UID is the pod UID. It tells apart two lives of a StatefulSet pod
	// (same name) on the same node and boot, which are different writers.
	UID string `json:"uid,omitempty"`
}

// writer appends records to one volume file while its volume stays
// published at one target path.
type writer struct {
	volumeID string
	f        *os.File
	rec      Record
	log      *slog.Logger
	stop     chan struct{}
	done     chan struct{}
}

// startWriter opens the volume file, writes the first record before it
// returns, so that the record precedes the pod's start, and keeps writing
// every interval until close.
func startWriter(path, volumeID string, rec Record, interval time.Duration, log *slog.Logger) (*writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	w := &writer{volumeID: volumeID, f: f, rec: rec, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	if err := w.write(); err != nil {
		f.Close()
		return nil, err
	}
	go w.loop(interval)
	return w, nil
}

func (w *writer) loop(interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			if err := w.write(); err != nil {
				// Keep going: a writer that stops on an error would hide
				// the very overlaps the checker looks for.
				w.log.Error("volume write failed", "volume", w.volumeID, "err", err)
			}
		}
	}
}

// write appends one whole line with a single O_APPEND write, so that lines
// from writers in different processes interleave but never mix.
func (w *writer) write() error {
	w.rec.Seq++
	w.rec.T = time.Now().UnixNano()
	b, err := json.Marshal(w.rec)
	if err != nil {
		return err
	}
	_, err = w.f.Write(append(b, '\n'))
	return err
}

// close stops the writer and waits until it wrote its last record.
func (w *writer) close() {
	close(w.stop)
	<-w.done
	w.f.Close()
}
