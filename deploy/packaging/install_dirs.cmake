# Install-time helper (install(CODE) includes it, after setting CMAKE_INSTALL_<dir> to their
# configure-time values): FM_FULL_BINDIR, FM_FULL_SYSCONFDIR and FM_FULL_DATAROOTDIR for the
# prefix this install actually uses (`cmake --install --prefix`, or CPack's /usr), by
# GNUInstallDirs' own rule: prefix /usr → /etc, /usr/local → /usr/local/etc, /opt/X → /etc/opt/X.
# Evaluated at install time, not configure time, because one build tree serves both
# `cmake --install` (default prefix /usr/local) and the packages (prefix /usr).
include(GNUInstallDirs)
foreach(_fm_dir BINDIR SYSCONFDIR DATAROOTDIR)
  GNUInstallDirs_get_absolute_install_dir(FM_FULL_${_fm_dir} CMAKE_INSTALL_${_fm_dir} ${_fm_dir})
endforeach()
