# Install-time helper (install(CODE) includes it, after install_dirs.cmake): copies FM_SRC to
# FM_DEST_DIR/FM_NAME, rewriting the absolute paths it contains for the prefix this install
# uses, so that `cmake --install build` (prefix /usr/local) installs units that run
# /usr/local/bin/... and read /usr/local/etc/fabricmon/..., while the packages (prefix /usr) keep
# the source text unchanged: /usr/bin/..., /etc/fabricmon/....
#
# In: FM_SRC (file), FM_DEST_DIR (relative to the prefix, or absolute; a leading <sysconfdir>
#     stands for FM_FULL_SYSCONFDIR), FM_NAME (installed name), FM_STAGE (a scratch dir in the
#     build tree), FM_KEEP_EXISTING (optional: leave an existing file alone, for configuration
#     that `cmake --install` must not overwrite).
# Uses CMAKE_INSTALL_PREFIX and DESTDIR as the install sets them.
file(READ "${FM_SRC}" _fm_text)
string(REPLACE "/usr/bin/" "${FM_FULL_BINDIR}/" _fm_text "${_fm_text}")
string(REPLACE "/usr/share/" "${FM_FULL_DATAROOTDIR}/" _fm_text "${_fm_text}")
string(REPLACE "/etc/fabricmon/" "${FM_FULL_SYSCONFDIR}/fabricmon/" _fm_text "${_fm_text}")
string(REPLACE "<sysconfdir>" "${FM_FULL_SYSCONFDIR}" _fm_dest "${FM_DEST_DIR}")
if(NOT IS_ABSOLUTE "${_fm_dest}")
  set(_fm_dest "${CMAKE_INSTALL_PREFIX}/${_fm_dest}")
endif()
if(FM_KEEP_EXISTING AND EXISTS "$ENV{DESTDIR}${_fm_dest}/${FM_NAME}")
  message(STATUS "Keeping: $ENV{DESTDIR}${_fm_dest}/${FM_NAME} (exists; the example is "
                 "${FM_SRC})")
  return()
endif()
string(MD5 _fm_key "${CMAKE_INSTALL_PREFIX}|$ENV{DESTDIR}")
set(_fm_staged "${FM_STAGE}/${_fm_key}/${FM_NAME}")
file(WRITE "${_fm_staged}" "${_fm_text}")
# file(INSTALL) prepends DESTDIR and records the file in install_manifest.txt.
file(INSTALL DESTINATION "${_fm_dest}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${_fm_staged}")
