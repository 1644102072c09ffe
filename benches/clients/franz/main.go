// Command franz-bench is the franz-go client of benches/clients/run: it
// produces or consumes one benchmark workload with franz-go (kgo) and the same
// settings as the other clients, then reports what the harness checks.
//
//	franz-bench produce -brokers B -topic T -count N -value-size S -compression C
//	franz-bench consume -brokers B -topic T -count N
//	franz-bench consume -brokers B -topic T -group G [-group-protocol classic|consumer] [-count N]
//	franz-bench latency -brokers B -topic T -rate R -duration D -warmup W [-value-size S]
//
// produce: N records of S bytes of 'x', no key, acks=all, idempotent,
// linger 5 ms, batch.size 256 KiB (before compression), franz-go's default
// partitioner; one callback per record counts failures. It prints
// "produced N records (F failed)" on stderr and exits non-zero if F > 0.
// With -input FILE: one record per line of FILE instead, "KEY<TAB>VALUE"
// (the harness's realistic payload file; -count must be its line count).
// With -rate R: R records per second, paced in 10 ms ticks, round robin over
// the partitions (a live feed for benches/groups/run); -count 0 with -rate
// produces until SIGTERM or SIGINT.
//
// consume: from the beginning of every partition, no group, until N records;
// one '.' per record to stdout (buffered), like `kcat -f .` and our CLI's
// `--format .`, so the harness checks the count by the output's size. More
// records than N, or none for -idle-timeout, is an error.
//
// consume -group G: the same as a member of consumer group G (kgo.ConsumerGroup,
// subscribing to the topic): the classic protocol with franz-go's default
// cooperative-sticky balancer, or KIP-848 (-group-protocol consumer:
// kgo.ServerSideBalancer, the broker's "uniform" assignor; -remote-assignor
// range picks "range"). A fresh group starts at the earliest offset
// (auto.offset.reset=earliest); offsets are auto-committed (franz-go's
// default, 5 s) and on leave. -count 0 consumes until SIGTERM or SIGINT,
// which close the client: commit, then leave the group (no leave with
// -instance-id, a static member). -format lines prints "PARTITION OFFSET"
// per record instead of '.' (also without -group); lines, and both formats
// in group mode, are flushed after every poll, so the harness sees when each
// record arrived.
//
// latency: end-to-end latency at a fixed rate (issue 23), the same rules as
// benches/clients/latency.rs: record i is due at start + i/R, the producer
// sends every due record each 1 ms tick with its due time (nanoseconds since
// a process-wide monotonic origin) and i in the first 16 bytes of the value;
// a consumer in the same process (no group, from the end of every partition,
// assigned before the first send) takes now - due per record; records due
// in the first -warmup are not counted. Prints one JSON line with p50, p99,
// p99.9, max and mean in microseconds.
//
// This is a benchmark client, written for this repository; it measures
// nothing itself (the harness takes CPU, wall time and peak RSS from wait4).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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
	case "latency":
		err = latency(os.Args[2:])
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
	rate := fs.Int("rate", 0, "records per second, round robin over the partitions (0: as fast as possible)")
	input := fs.String("input", "", "produce one record per line of this file, KEY<TAB>VALUE (-count: its line count)")
	fs.Parse(argv)
	if c.count == 0 && *rate > 0 && c.topic != "" {
		c.count = -1 // until a signal
	} else if err := c.check(); err != nil {
		return err
	}
	if *valueSize < 0 {
		return fmt.Errorf("-value-size must not be negative, got %d", *valueSize)
	}
	cc, err := codec(*compression)
	if err != nil {
		return err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(c.brokers, ",")...),
		kgo.DefaultProduceTopic(c.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent: franz-go's default with acks=all
		kgo.ProducerLinger(time.Duration(*lingerMs) * time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(*batchSize)),
		kgo.ProducerBatchCompression(cc),
	}
	if *rate > 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	}
	cl, err := kgo.NewClient(opts...)
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
	var sent int64
	if *rate > 0 {
		sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		started := time.Now()
		for (c.count < 0 || sent < c.count) && sig.Err() == nil {
			select {
			case <-sig.Done():
			case now := <-tick.C:
				due := int64(now.Sub(started).Seconds() * float64(*rate))
				for ; sent < due && (c.count < 0 || sent < c.count); sent++ {
					cl.Produce(ctx, &kgo.Record{Value: value}, done)
				}
			}
		}
	} else if *input != "" {
		f, err := os.Open(*input)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() && sent < c.count {
			line := sc.Bytes()
			rec := &kgo.Record{}
			if i := bytes.IndexByte(line, '\t'); i >= 0 {
				rec.Key = append([]byte(nil), line[:i]...)
				rec.Value = append([]byte(nil), line[i+1:]...)
			} else {
				rec.Value = append([]byte(nil), line...)
			}
			cl.Produce(ctx, rec, done)
			sent++
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", *input, err)
		}
		if sent != c.count {
			return fmt.Errorf("%s has %d lines, -count is %d", *input, sent, c.count)
		}
	} else {
		for ; sent < c.count; sent++ {
			// One Record per record, as an application would; the value bytes
			// are shared, as they are for our CLI's generated values.
			cl.Produce(ctx, &kgo.Record{Value: value}, done)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	f := failed.Load()
	fmt.Fprintf(os.Stderr, "produced %d records (%d failed)\n", sent-f, f)
	if f > 0 {
		return fmt.Errorf("%d records failed, first: %v", f, firstErr.Load())
	}
	return nil
}

func consume(argv []string) error {
	var c common
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	c.register(fs)
	idle := fs.Duration("idle-timeout", 30*time.Second, "give up after this long without a record (0: never)")
	group := fs.String("group", "", "consume as a member of this consumer group (default: no group)")
	protocol := fs.String("group-protocol", "classic", "with -group: classic or consumer (KIP-848)")
	remoteAssignor := fs.String("remote-assignor", "uniform", "with -group-protocol consumer: uniform or range")
	session := fs.Duration("session-timeout", 45*time.Second, "with -group classic: session.timeout.ms")
	heartbeat := fs.Duration("heartbeat-interval", 3*time.Second, "with -group classic: heartbeat.interval.ms")
	instanceID := fs.String("instance-id", "", "with -group: group.instance.id (a static member)")
	format := fs.String("format", "dots", "dots ('.' per record) or lines (\"PARTITION OFFSET\" per record)")
	verbose := fs.Bool("v", false, "franz-go's info log on stderr")
	fs.Parse(argv)
	if c.topic == "" {
		return errors.New("-topic is required")
	}
	if c.count < 0 || (c.count == 0 && *group == "") {
		return fmt.Errorf("-count must be at least 1 (0 only with -group: until a signal), got %d", c.count)
	}
	if *format != "dots" && *format != "lines" {
		return fmt.Errorf("-format: unknown %q; allowed: dots, lines", *format)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(c.brokers, ",")...),
		kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if *group != "" {
		opts = append(opts, kgo.ConsumerGroup(*group))
		switch *protocol {
		case "classic":
			opts = append(opts, kgo.SessionTimeout(*session), kgo.HeartbeatInterval(*heartbeat))
		case "consumer":
			// The broker's assignor follows the first balancer:
			// cooperative-sticky -> uniform, range -> range.
			switch *remoteAssignor {
			case "uniform":
			case "range":
				opts = append(opts, kgo.Balancers(kgo.RangeBalancer()))
			default:
				return fmt.Errorf("-remote-assignor: unknown %q; allowed: uniform, range", *remoteAssignor)
			}
			opts = append(opts, kgo.ServerSideBalancer())
		default:
			return fmt.Errorf("-group-protocol: unknown %q; allowed: classic, consumer", *protocol)
		}
		if *instanceID != "" {
			opts = append(opts, kgo.InstanceID(*instanceID))
		}
	} else if *protocol != "classic" || *instanceID != "" {
		return errors.New("-group-protocol and -instance-id need -group")
	}
	if *verbose {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	// Close commits (auto-commit) and leaves the group; it runs on every
	// return, also after a signal.
	defer cl.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	out := bufio.NewWriterSize(os.Stdout, 64*1024)
	lines := *format == "lines"
	flushEach := *group != "" || lines
	var got int64
	var line []byte
	for c.count == 0 || got < c.count {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if *idle > 0 {
			pollCtx, cancel = context.WithTimeout(ctx, *idle)
		}
		fetches := cl.PollFetches(pollCtx)
		timedOut := pollCtx.Err() != nil
		cancel()
		if fetches.IsClientClosed() {
			return errors.New("client closed")
		}
		if timedOut && ctx.Err() == nil && fetches.NumRecords() == 0 {
			return fmt.Errorf("no record for %v after %d of %d records", *idle, got, c.count)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			got++
			if lines {
				line = strconv.AppendInt(line[:0], int64(r.Partition), 10)
				line = append(line, ' ')
				line = strconv.AppendInt(line, r.Offset, 10)
				line = append(line, '\n')
				out.Write(line)
			} else {
				out.WriteByte('.')
			}
		})
		if flushEach {
			if err := out.Flush(); err != nil {
				return fmt.Errorf("writing stdout: %w", err)
			}
		}
		if ctx.Err() != nil {
			break // signalled: what this poll returned is printed; Close commits it and leaves
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("writing stdout: %w", err)
	}
	if c.count > 0 && got != c.count {
		return fmt.Errorf("consumed %d records, expected exactly %d", got, c.count)
	}
	return nil
}

func latency(argv []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:19092", "bootstrap brokers, comma-separated")
	topic := fs.String("topic", "", "topic (must exist)")
	rate := fs.Int64("rate", 1000, "records per second")
	duration := fs.Duration("duration", 20*time.Second, "how long to produce")
	warmup := fs.Duration("warmup", 5*time.Second, "records due in this first span are not counted")
	drain := fs.Duration("drain", 30*time.Second, "give up this long after the last record was due")
	valueSize := fs.Int("value-size", 100, "bytes per value (at least 16)")
	compression := fs.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	lingerMs := fs.Int("linger-ms", 1, "linger in milliseconds")
	fs.Parse(argv)
	if *topic == "" {
		return errors.New("-topic is required")
	}
	if *rate < 1 || *valueSize < 16 || *warmup >= *duration {
		return errors.New("-rate must be at least 1, -value-size at least 16, -warmup less than -duration")
	}
	cc, err := codec(*compression)
	if err != nil {
		return err
	}
	seed := strings.Split(*brokers, ",")
	// The consumer starts at the end of every partition (fresh topic: 0).
	cons, err := kgo.NewClient(kgo.SeedBrokers(seed...), kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seed...), kgo.DefaultProduceTopic(*topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Duration(*lingerMs)*time.Millisecond),
		kgo.ProducerBatchCompression(cc))
	if err != nil {
		return err
	}
	defer prod.Close()
	ctx := context.Background()
	if err := prod.Ping(ctx); err != nil {
		return err
	}
	// Let the consumer find its partitions and their end offsets first.
	warm, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	cons.PollFetches(warm)
	cancel()

	origin := time.Now()
	nowNs := func() int64 { return int64(time.Since(origin)) }
	total := int64(float64(*rate) * duration.Seconds())
	period := 1e9 / float64(*rate)
	start := nowNs() + 50_000_000
	warmEnd := start + int64(*warmup)
	var failed atomic.Int64
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	filler := []byte(strings.Repeat("x", *valueSize-16))
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var i int64
		for i < total {
			<-tick.C
			now := nowNs()
			for ; i < total; i++ {
				due := start + int64(float64(i)*period)
				if due > now {
					break
				}
				v := make([]byte, 16, *valueSize)
				binary.BigEndian.PutUint64(v, uint64(due))
				binary.BigEndian.PutUint64(v[8:], uint64(i))
				v = append(v, filler...)
				prod.Produce(ctx, &kgo.Record{Value: v}, done)
			}
		}
	}()
	lastDue := start + int64(float64(total-1)*period)
	giveUp := lastDue + int64(*drain)
	lat := make([]int64, 0, total)
	var received int64
	for received < total {
		if nowNs() > giveUp {
			return fmt.Errorf("received %d of %d records within -drain after the last was due", received, total)
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fetches := cons.PollFetches(pctx)
		cancel()
		now := nowNs()
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			received++
			if len(r.Value) < 16 {
				return
			}
			due := int64(binary.BigEndian.Uint64(r.Value))
			if due >= warmEnd {
				lat = append(lat, now-due)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	if len(lat) == 0 {
		return errors.New("no record after the warm-up")
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	pct := func(q float64) float64 {
		rank := int(float64(len(lat))*q + 0.999999999)
		if rank < 1 {
			rank = 1
		}
		if rank > len(lat) {
			rank = len(lat)
		}
		return float64(lat[rank-1]/100) / 10
	}
	var sum float64
	for _, x := range lat {
		sum += float64(x)
	}
	out, _ := json.Marshal(map[string]any{
		"backend": "franz-go", "rate": *rate, "sent": total, "received": received, "failed": failed.Load(),
		"measured": len(lat), "p50_us": pct(0.5), "p99_us": pct(0.99), "p999_us": pct(0.999),
		"max_us": float64(lat[len(lat)-1]/100) / 10, "mean_us": float64(int64(sum/float64(len(lat))/100)) / 10,
	})
	fmt.Println(string(out))
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d deliveries failed", f)
	}
	return nil
}
