package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
)

// groupLag returns how many records of the events topic the consumer group
// has not committed yet, and the topic's end offset sum.
func groupLag(ctx context.Context, addr, group string) (uncommitted, end int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	topic := starter.DefaultEventsTopic
	c := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second}
	nparts := int(stack.Topics[topic])
	parts := make([]int, nparts)
	reqs := make([]kafka.OffsetRequest, nparts)
	for i := range nparts {
		parts[i] = i
		reqs[i] = kafka.LastOffsetOf(i)
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, 0, fmt.Errorf("list offsets: %w", err)
	}
	ends := map[int]int64{}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return 0, 0, fmt.Errorf("list offsets of partition %d: %w", p.Partition, p.Error)
		}
		ends[p.Partition] = p.LastOffset
		end += p.LastOffset
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return 0, 0, fmt.Errorf("offset fetch: %w", err)
	}
	if of.Error != nil {
		return 0, 0, fmt.Errorf("offset fetch: %w", of.Error)
	}
	committed := map[int]int64{}
	for _, p := range of.Topics[topic] {
		if p.Error == nil && p.CommittedOffset > 0 {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	for p, e := range ends {
		uncommitted += max(e-committed[p], 0)
	}
	return uncommitted, end, nil
}

// waitCommitted waits until the group has committed the whole events topic.
func waitCommitted(ctx context.Context, addr, group string) error {
	var lastErr error
	for {
		unc, end, err := groupLag(ctx, addr, group)
		if err == nil && unc == 0 && end > 0 {
			return nil
		}
		if err != nil {
			lastErr = err
		} else {
			lastErr = fmt.Errorf("%d of %d records uncommitted", unc, end)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s: %v: %w", group, lastErr, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deadLetters reads the deliveries DLQ and returns the distinct recipients
// dead-lettered for eventID, and the number of records.
func deadLetters(ctx context.Context, addr, eventID string) (map[string]bool, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	recips := map[string]bool{}
	n := 0
	err := kafkatopic.ReadAll(ctx, kafkatopic.Conn{Brokers: []string{addr}}, activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		var d activities.DeadLetter
		if err := json.Unmarshal(m.Value, &d); err != nil {
			return nil
		}
		if d.EventID == eventID {
			recips[d.Recipient.ID] = true
			n++
		}
		return nil
	})
	return recips, n, err
}

// bridgeStats reads the last "bridge stopped" line of a bridge log (JSON,
// written at info level when the bridge stops gracefully).
func bridgeStats(path string) (started, duplicates int64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"bridge stopped"`) {
			continue
		}
		var v struct {
			Started    int64 `json:"started"`
			Duplicates int64 `json:"duplicates"`
		}
		if json.Unmarshal([]byte(line), &v) == nil {
			started, duplicates, ok = v.Started, v.Duplicates, true
		}
	}
	return started, duplicates, ok
}
