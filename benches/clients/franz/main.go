// Command franz-bench is the franz-go client of benches/clients/run: it
// produces or consumes one benchmark workload with franz-go (kgo) and the same
// settings as the other clients, then reports what the harness checks.
//
//	franz-bench produce -brokers B -topic T -count N -value-size S -compression C
//	franz-bench consume -brokers B -topic T -count N
//
// produce: N records of S bytes of 'x', no key, acks=all, idempotent,
// linger 5 ms, batch.size 256 KiB (before compression), franz-go's default
// partitioner; one callback per record counts failures. It prints
// "produced N records (F failed)" on stderr and exits non-zero if F > 0.
//
// consume: from the beginning of every partition, no group, until N records;
// one '.' per record to stdout (buffered), like `kcat -f .` and our CLI's
// `--format .`, so the harness checks the count by the output's size. More
// records than N, or none for -idle-timeout, is an error.
//
// This is a benchmark client, written for this repository; it measures
// nothing itself (the harness takes CPU, wall time and peak RSS from wait4).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "consume":
		err = consume(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "franz-bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: franz-bench produce|consume -brokers HOST:PORT -topic T -count N [options]")
	os.Exit(2)
}

type common struct {
	brokers string
	topic   string
	count   int64
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:19092", "bootstrap brokers, comma-separated")
	fs.StringVar(&c.topic, "topic", "", "topic (must exist)")
	fs.Int64Var(&c.count, "count", 0, "number of records (at least 1)")
}

func (c *common) check() error {
	if c.topic == "" {
		return errors.New("-topic is required")
	}
	if c.count < 1 {
		return fmt.Errorf("-count must be at least 1, got %d", c.count)
	}
	return nil
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("-compression: unknown codec %q; allowed: none, gzip, snappy, lz4, zstd", name)
}

func produce(argv []string) error {
	var c common
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	c.register(fs)
	valueSize := fs.Int("value-size", 100, "bytes per value")
	compression := fs.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	lingerMs := fs.Int("linger-ms", 5, "linger in milliseconds")
	batchSize := fs.Int("batch-size", 256*1024, "max bytes of a record batch before compression")
	fs.Parse(argv)
	if err := c.check(); err != nil {
		return err
	}
	if *valueSize < 0 {
		return fmt.Errorf("-value-size must not be negative, got %d", *valueSize)
	}
	cc, err := codec(*compression)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(c.brokers, ",")...),
		kgo.DefaultProduceTopic(c.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent: franz-go's default with acks=all
		kgo.ProducerLinger(time.Duration(*lingerMs)*time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(*batchSize)),
		kgo.ProducerBatchCompression(cc),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	value := []byte(strings.Repeat("x", *valueSize))
	var failed atomic.Int64
	var firstErr atomic.Value
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}
	}
	ctx := context.Background()
	for i := int64(0); i < c.count; i++ {
		// One Record per record, as an application would; the value bytes
		// are shared, as they are for our CLI's generated values.
		cl.Produce(ctx, &kgo.Record{Value: value}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	f := failed.Load()
	fmt.Fprintf(os.Stderr, "produced %d records (%d failed)\n", c.count-f, f)
	if f > 0 {
		return fmt.Errorf("%d records failed, first: %v", f, firstErr.Load())
	}
	return nil
}

func consume(argv []string) error {
	var c common
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	c.register(fs)
	idle := fs.Duration("idle-timeout", 30*time.Second, "give up after this long without a record")
	fs.Parse(argv)
	if err := c.check(); err != nil {
		return err
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(c.brokers, ",")...),
		kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	out := bufio.NewWriterSize(os.Stdout, 64*1024)
	var got int64
	for got < c.count {
		ctx, cancel := context.WithTimeout(context.Background(), *idle)
		fetches := cl.PollFetches(ctx)
		cancel()
		if ctx.Err() != nil && fetches.NumRecords() == 0 {
			return fmt.Errorf("no record for %v after %d of %d records", *idle, got, c.count)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fetches.EachRecord(func(*kgo.Record) {
			got++
			out.WriteByte('.')
		})
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("writing stdout: %w", err)
	}
	if got != c.count {
		return fmt.Errorf("consumed %d records, expected exactly %d", got, c.count)
	}
	return nil
}
