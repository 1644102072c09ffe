// Command codecs-go compresses one record batch's records section with the
// codecs franz-go uses, configured as franz-go's kgo configures them
// (pkg/kgo/compression.go), and prints the ratio and the CPU time per record.
// The input comes from the Rust bench (wire/benches/codecs.rs with
// CODECS_DUMP=FILE), so both sides compress the same bytes; see
// benches/codecs.md for the commands.
//
//	go run . FILE RECORDS [ITERATIONS]
package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// cpu is this process's user + system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: codecs-go FILE RECORDS [ITERATIONS]")
		os.Exit(2)
	}
	src, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	records, err := strconv.Atoi(os.Args[2])
	if err != nil || records <= 0 {
		panic("RECORDS: a positive integer")
	}
	iterations := 200
	if len(os.Args) > 3 {
		if iterations, err = strconv.Atoi(os.Args[3]); err != nil || iterations <= 0 {
			panic("ITERATIONS: a positive integer")
		}
	}

	// As kgo: one pooled writer per codec, reset onto a reused buffer.
	gz, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
	lz := lz4.NewWriter(new(bytes.Buffer))
	_ = lz.Apply(lz4.CompressionLevelOption(lz4.CompressionLevel(0)))
	zenc, err := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
	if err != nil {
		panic(err)
	}
	dst := new(bytes.Buffer)

	codecs := []struct {
		name string
		fn   func() []byte
	}{
		{"gzip", func() []byte {
			dst.Reset()
			gz.Reset(dst)
			if _, err := gz.Write(src); err != nil {
				panic(err)
			}
			if err := gz.Close(); err != nil {
				panic(err)
			}
			return dst.Bytes()
		}},
		{"snappy", func() []byte {
			dst.Reset()
			if l := s2.MaxEncodedLen(len(src)); l > dst.Cap() {
				dst.Grow(l)
			}
			return s2.EncodeSnappy(dst.Bytes(), src)
		}},
		{"lz4", func() []byte {
			dst.Reset()
			lz.Reset(dst)
			if _, err := lz.Write(src); err != nil {
				panic(err)
			}
			if err := lz.Close(); err != nil {
				panic(err)
			}
			return dst.Bytes()
		}},
		{"zstd", func() []byte {
			dst.Reset()
			if l := zenc.MaxEncodedSize(len(src)); l > dst.Cap() {
				dst.Grow(l)
			}
			return zenc.EncodeAll(src, dst.Bytes())
		}},
	}
	fmt.Printf("| codec | ratio | CPU ns/record | wall ns/record |\n|---|---|---|---|\n")
	for _, c := range codecs {
		out := len(c.fn()) // warm-up: pools and buffers grown
		c0, w0 := cpu(), time.Now()
		for i := 0; i < iterations; i++ {
			out = len(c.fn())
		}
		per := float64(iterations * records)
		fmt.Printf("| %s | %.2f | %.0f | %.0f |\n", c.name, float64(len(src))/float64(out),
			float64(cpu()-c0)/per, float64(time.Since(w0).Nanoseconds())/per)
	}
}
