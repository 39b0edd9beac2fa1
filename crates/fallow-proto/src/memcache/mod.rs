//! memcached codecs (being written on branch wt-mc).
