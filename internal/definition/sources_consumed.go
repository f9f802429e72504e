package definition

import (
	"fmt"
	"net"
	"strings"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// compileNATS checks a NATS JetStream source at field f into out, its
// consumer defaulted to consumer.
func compileNATS(l *errorList, f string, n v1alpha1.NATSSource, consumer string, out *EventSource) {
	if strings.TrimSpace(n.URL) == "" {
		l.add(f+".url", "required: the server, like nats://nats.messaging:4222")
	}
	for i, u := range strings.Split(n.URL, ",") {
		if u = strings.TrimSpace(u); u != "" && !strings.Contains(u, "://") && strings.Contains(u, "/") {
			l.add(f+".url", "server %d, %q, is not host:port nor a nats://, tls:// or ws:// URL", i+1, u)
		}
	}
	checkNATSName(l, f+".stream", n.Stream, true)
	if n.Consumer == "" {
		n.Consumer = consumer
	}
	checkNATSName(l, f+".consumer", n.Consumer, false)
	for i, sub := range n.Subjects {
		if sub == "" || strings.ContainsAny(sub, " \t\r\n") || strings.HasPrefix(sub, ".") || strings.HasSuffix(sub, ".") || strings.Contains(sub, "..") {
			l.add(fmt.Sprintf("%s.subjects[%d]", f, i), "%q is not a NATS subject (tokens separated by dots, * and > as wildcards, no spaces)", sub)
		}
	}
	checkChoice(l, f+".deliverPolicy", &n.DeliverPolicy, v1alpha1.DeliverNew, v1alpha1.DeliverAll)
	auth := 0
	for _, ref := range []struct {
		name string
		ref  *v1alpha1.SecretKeySelector
	}{{"tokenSecretRef", n.TokenSecretRef}, {"credsSecretRef", n.CredsSecretRef}, {"passwordSecretRef", n.PasswordSecretRef}} {
		if ref.ref != nil {
			auth++
			checkSecretRef(l, f+"."+ref.name, *ref.ref)
		}
	}
	switch {
	case auth > 1:
		l.add(f, "set at most one of tokenSecretRef, credsSecretRef and username with passwordSecretRef")
	case (n.Username != "") != (n.PasswordSecretRef != nil):
		l.add(f+".username", "username and passwordSecretRef go together")
	}
	checkTLS(l, f+".tls", n.TLS)
	n.MaxBodyBytes = checkMaxBody(l, f+".maxBodyBytes", n.MaxBodyBytes)
	out.NATS, out.MaxBodyBytes = &n, n.MaxBodyBytes
}

// compileKafka checks a Kafka source at field f into out, its consumer
// group defaulted to consumer.
func compileKafka(l *errorList, f string, k v1alpha1.KafkaSource, consumer string, out *EventSource) {
	if len(k.Brokers) == 0 {
		l.add(f+".brokers", "required: the seed brokers, like kafka.messaging:9092")
	}
	for i, b := range k.Brokers {
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || port == "" {
			l.add(fmt.Sprintf("%s.brokers[%d]", f, i), "%q is not host:port", b)
		}
	}
	if len(k.Topics) == 0 {
		l.add(f+".topics", "required: the topics to consume")
	}
	for i, t := range k.Topics {
		if !kafkaNameRE.MatchString(t) {
			l.add(fmt.Sprintf("%s.topics[%d]", f, i), "%q is not a Kafka topic (letters, digits, '.', '_' and '-', at most 249)", t)
		}
	}
	if k.Group == "" {
		k.Group = consumer
	}
	if !kafkaNameRE.MatchString(k.Group) {
		l.add(f+".group", "%q is not a consumer group name (letters, digits, '.', '_' and '-', at most 249)", k.Group)
	}
	checkChoice(l, f+".startOffset", &k.StartOffset, v1alpha1.OffsetLatest, v1alpha1.OffsetEarliest)
	if k.SASL != nil {
		switch k.SASL.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			l.add(f+".sasl.mechanism", "%q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.SASL.Mechanism)
		}
		if k.SASL.Username == "" {
			l.add(f+".sasl.username", "required")
		}
		checkSecretRef(l, f+".sasl.passwordSecretRef", k.SASL.PasswordSecretRef)
	}
	checkTLS(l, f+".tls", k.TLS)
	k.MaxBodyBytes = checkMaxBody(l, f+".maxBodyBytes", k.MaxBodyBytes)
	out.Kafka, out.MaxBodyBytes = &k, k.MaxBodyBytes
}
