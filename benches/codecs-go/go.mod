module clink-kafka/benches/codecs-go

go 1.26.0

require (
	github.com/klauspost/compress v1.20.3
	github.com/pierrec/lz4/v4 v4.1.33
)
