namespace pgw::sim {}
