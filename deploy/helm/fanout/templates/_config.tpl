{{/* The ConfigMap data: the release ConfigMap and the setup hook's copy. */}}
{{- define "fanout.configData" -}}
TEMPORAL_ADDRESS: {{ .Values.temporal.address | quote }}
TEMPORAL_NAMESPACE: {{ .Values.temporal.namespace | quote }}
{{- if .Values.temporal.apiKey.enabled }}
FANOUT_TEMPORAL_API_KEY_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .Values.temporal.apiKey.secretKey) | quote }}
{{- end }}
{{- with .Values.temporal.tls }}
{{- if or .enabled .certSecretKey .caSecretKey }}
TEMPORAL_TLS: "true"
{{- end }}
{{- with .serverName }}
TEMPORAL_TLS_SERVER_NAME: {{ . | quote }}
{{- end }}
{{- with .caSecretKey }}
TEMPORAL_TLS_SERVER_CA_CERT_PATH: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- if or .certSecretKey .keySecretKey }}
TEMPORAL_TLS_CLIENT_CERT_PATH: {{ include "fanout.secretFile" (dict "root" $ "key" (required "temporal.tls.certSecretKey: mTLS needs both certificate and key" .certSecretKey)) | quote }}
TEMPORAL_TLS_CLIENT_KEY_PATH: {{ include "fanout.secretFile" (dict "root" $ "key" (required "temporal.tls.keySecretKey: mTLS needs both certificate and key" .keySecretKey)) | quote }}
{{- end }}
{{- end }}
FANOUT_KAFKA_BROKERS: {{ required "kafka.brokers" .Values.kafka.brokers | join "," | quote }}
FANOUT_EVENTS_TOPIC: {{ .Values.kafka.eventsTopic | quote }}
FANOUT_EVENTS_DLQ_TOPIC: {{ .Values.kafka.eventsDLQTopic | quote }}
FANOUT_DELIVERIES_DLQ_TOPIC: {{ .Values.kafka.deliveriesDLQTopic | quote }}
FANOUT_CONSUMER_GROUP: {{ .Values.kafka.consumerGroup | quote }}
{{- with .Values.kafka.tls }}
{{- if .enabled }}
FANOUT_KAFKA_TLS: "true"
{{- with .serverName }}
FANOUT_KAFKA_TLS_SERVER_NAME: {{ . | quote }}
{{- end }}
{{- if .insecureSkipVerify }}
FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY: "true"
{{- end }}
{{- with .caSecretKey }}
FANOUT_KAFKA_TLS_CA_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- if or .certSecretKey .keySecretKey }}
FANOUT_KAFKA_TLS_CERT_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" (required "kafka.tls.certSecretKey: mTLS needs both certificate and key" .certSecretKey)) | quote }}
FANOUT_KAFKA_TLS_KEY_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" (required "kafka.tls.keySecretKey: mTLS needs both certificate and key" .keySecretKey)) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.kafka.sasl }}
{{- if .mechanism }}
FANOUT_KAFKA_SASL_MECHANISM: {{ .mechanism | quote }}
FANOUT_KAFKA_SASL_USERNAME: {{ required "kafka.sasl.username" .username | quote }}
FANOUT_KAFKA_SASL_PASSWORD_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" (required "kafka.sasl.passwordSecretKey" .passwordSecretKey)) | quote }}
{{- end }}
{{- end }}
FANOUT_REDIS_URL: {{ .Values.redis.url | quote }}
FANOUT_REDIS_MODE: {{ .Values.redis.mode | quote }}
{{- with .Values.redis.masterName }}
FANOUT_REDIS_MASTER_NAME: {{ . | quote }}
{{- end }}
{{- with .Values.redis.passwordSecretKey }}
FANOUT_REDIS_PASSWORD_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- with .Values.redis.sentinelPasswordSecretKey }}
FANOUT_REDIS_SENTINEL_PASSWORD_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- with .Values.redis.caSecretKey }}
FANOUT_REDIS_TLS_CA_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- with .Values.codec.keysSecretKey }}
FANOUT_CODEC_KEYS_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- with .Values.codec.keyID }}
FANOUT_CODEC_KEY_ID: {{ . | quote }}
{{- end }}
{{- with .Values.webhook.secretsSecretKey }}
FANOUT_WEBHOOK_SECRETS_FILE: {{ include "fanout.secretFile" (dict "root" $ "key" .) | quote }}
{{- end }}
{{- with .Values.webhook.recipientsURL }}
FANOUT_RECIPIENTS_URL: {{ . | quote }}
{{- end }}
FANOUT_EVENT_TYPES: {{ .Values.eventTypes | join "," | quote }}
FANOUT_EVENT_TTL: {{ .Values.eventTTL | quote }}
FANOUT_GATE_TTL: {{ .Values.gateTTL | quote }}
FANOUT_METRICS_ADDR: {{ printf ":%v" .Values.metricsPort | quote }}
FANOUT_LOG_LEVEL: {{ .Values.logLevel | quote }}
{{- range $k, $v := .Values.extraEnv }}
{{ $k }}: {{ $v | toString | quote }}
{{- end }}
{{- end }}
