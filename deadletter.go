package fanout

import "time"

// DefaultDeliveriesDLQTopic is where recipients go after MaxAttempts.
const DefaultDeliveriesDLQTopic = "fanout-deliveries-dlq"

// DeadLetter is one recipient that could not be delivered, as written (JSON)
// to the deliveries DLQ topic. It carries what a redrive needs to deliver it
// again through the same gate: the event, the batch's attempt id and the
// message.
type DeadLetter struct {
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	Priority  Priority  `json:"priority"`
	AttemptID string    `json:"attempt_id"`
	Recipient Recipient `json:"recipient"`
	Attempts  int       `json:"attempts"`
	Permanent bool      `json:"permanent"`
	LastError string    `json:"last_error"`
	Time      time.Time `json:"time"`
	Event     Event     `json:"event"`
	Message   Message   `json:"message"`
}
