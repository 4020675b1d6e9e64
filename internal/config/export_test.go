package config

// RedisMode is the mode setup resolves c to, for the external tests.
func RedisMode(c RedisConn) (string, error) {
	s, err := c.setup()
	return s.mode, err
}
